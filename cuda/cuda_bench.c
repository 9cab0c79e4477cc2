/* fp4forge-cuda-bench DIR [--check]: quantizes every unit of DIR's plan on the
 * GPU, compares each byte with the CPU kernel (--check) and reports GB/s
 * (kernels alone, and with the host<->device copies). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "nvfp4.h"
#include "nvfp4_cuda.h"
#include "plan.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct tally {
    uint64_t bytes, units, members, byte_diffs, gs_diffs, checked;
    double cpu_s;
} tally;

static size_t max_unit_elems(const plan *p)
{
    size_t best = 0;
    for (size_t u = 0; u < p->nunits; u++) {
        size_t n = 0;
        for (size_t k = 0; k < p->units[u].count; k++) {
            const plan_member *m = &p->members[p->units[u].first + k];
            n += m->rows * m->cols;
        }
        best = n > best ? n : best;
    }
    return best;
}

static uint64_t diff_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint64_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += a[i] != b[i];
    return d;
}

/* The CPU reference for one unit: absmax over the members, global scale,
 * the fastest CPU kernel; then byte comparison with the GPU's output. */
static void check_unit(const ckpt *c, const plan *p, const plan_unit *u, float gs_gpu, uint8_t **gp,
                       uint8_t **gsc, tally *t)
{
    double t0 = now();
    float amax = 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        float a;
        uint64_t bad;
        nvfp4_absmax(ckpt_data(c, m->src) + m->row0 * m->cols * 2, FF_DT_BF16, m->rows * m->cols, &a, &bad);
        amax = a > amax ? a : amax;
    }
    float gs = nvfp4_global_scale(amax, FF_DT_BF16);
    t->gs_diffs += gs != gs_gpu;
    nvfp4_rows_fn fn = nvfp4_best_kernel(NULL);
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        uint8_t *pk = malloc(m->rows * m->cols / 2), *sc = malloc(m->rows * m->cols / 16);
        fn(ckpt_data(c, m->src), FF_DT_BF16, m->cols, m->row0, m->rows, gs, pk, sc);
        t->byte_diffs += diff_bytes(pk, gp[k], m->rows * m->cols / 2) + diff_bytes(sc, gsc[k], m->rows * m->cols / 16);
        t->checked += m->rows * m->cols / 2 + m->rows * m->cols / 16;
        free(pk);
        free(sc);
    }
    t->cpu_s += now() - t0;
}

static int run_unit(nvfp4_gpu *g, const ckpt *c, const plan *p, const plan_unit *u, int check, tally *t)
{
    size_t at = 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        if (m->src->st->dtype != FF_DT_BF16)
            return 0;                       /* the GPU path is bf16-only */
        const uint16_t *src = (const uint16_t *)ckpt_data(c, m->src) + m->row0 * m->cols;
        if (nvfp4_gpu_upload(g, at, src, m->rows * m->cols))
            return 1;
        at += m->rows * m->cols;
    }
    float amax = nvfp4_gpu_absmax(g, at);
    if (amax < 0)
        return 1;
    float gs = nvfp4_global_scale(amax, FF_DT_BF16);
    uint8_t *gp[64] = {0}, *gsc[64] = {0};
    size_t off = 0;
    for (size_t k = 0; k < u->count && k < 64; k++) {
        const plan_member *m = &p->members[u->first + k];
        gp[k] = malloc(m->rows * m->cols / 2);
        gsc[k] = malloc(m->rows * m->cols / 16);
        if (nvfp4_gpu_quantize(g, off, m->rows, m->cols, gs, gp[k], gsc[k]))
            return 1;
        off += m->rows * m->cols;
        t->members++;
    }
    t->bytes += at * 2;
    t->units++;
    if (check)
        check_unit(c, p, u, gs, gp, gsc, t);
    for (size_t k = 0; k < u->count && k < 64; k++) {
        free(gp[k]);
        free(gsc[k]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fp4forge-cuda-bench DIR [--check]\n");
        return 2;
    }
    int check = argc > 2 && strcmp(argv[2], "--check") == 0;
    ckpt c;
    plan p;
    ff_err e = {0};
    if (ckpt_open(&c, argv[1], 1, &e) || plan_build(&p, &c, NULL, &e)) {
        fprintf(stderr, "fp4forge-cuda-bench: %s\n", e.msg);
        return 1;
    }
    nvfp4_gpu *g;
    char err[256];
    if (nvfp4_gpu_create(&g, max_unit_elems(&p), err, sizeof err)) {
        fprintf(stderr, "fp4forge-cuda-bench: %s\n", err);
        return 1;
    }
    tally t = {0};
    double t0 = now();
    for (size_t u = 0; u < p.nunits; u++)
        if (run_unit(g, &c, &p, &p.units[u], check, &t)) {
            fprintf(stderr, "fp4forge-cuda-bench: GPU failure in unit %zu (%s)\n", u, p.members[p.units[u].first].module);
            return 1;
        }
    double wall = now() - t0 - t.cpu_s, kms = nvfp4_gpu_kernel_ms(g);
    printf("{\"units\": %llu, \"members\": %llu, \"bf16_bytes\": %llu, \"gpu_kernel_s\": %.4f, "
           "\"gpu_kernel_GBps\": %.1f, \"gpu_with_copies_s\": %.3f, \"gpu_with_copies_GBps\": %.2f, "
           "\"checked_bytes\": %llu, \"byte_diffs\": %llu, \"global_scale_diffs\": %llu, \"cpu_check_s\": %.3f}\n",
           (unsigned long long)t.units, (unsigned long long)t.members, (unsigned long long)t.bytes, kms / 1e3,
           (double)t.bytes / 1e9 / (kms / 1e3), wall, (double)t.bytes / 1e9 / wall,
           (unsigned long long)t.checked, (unsigned long long)t.byte_diffs, (unsigned long long)t.gs_diffs, t.cpu_s);
    nvfp4_gpu_destroy(g);
    plan_free(&p);
    ckpt_close(&c);
    return check && (t.byte_diffs || t.gs_diffs) ? 6 : 0;
}

/* The synthetic-checkpoint writer every family's maker shares: a family
 * lists its tensors (names and shapes in save order), its config.json and its
 * auxiliary files; this fills the weights with deterministic pseudo-random
 * bf16 (the bytes do not depend on the thread count) or, sparse, leaves holes
 * that read as zeros, and writes through the one checkpoint writer. */
#include "synth.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "fsutil.h"
#include "synth_list.h"
#include "threadpool.h"
#include "writer_int.h"

void synth_add(synth_list *l, synth_init k, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        synth_tensor *t = realloc(l->t, cap * sizeof *t);
        if (!t) {
            l->oom = 1;
            return;
        }
        l->t = t;
        l->cap = cap;
    }
    synth_tensor *t = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = a; t->shape[1] = b; t->shape[2] = c;
    t->init = k;
}

int synth_write_text(const char *dir, const char *name, const char *text, ff_err *e)
{
    char *p = fs_join(dir, name);
    FILE *f = p ? fopen(p, "w") : NULL;
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    free(p);
    return ok ? FF_OK : ff_fail(e, FF_EIO, "%s/%s: cannot write", dir, name);
}

static uint64_t numel(const synth_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

int synth_preset(const char *preset, const char *size, synth_geom *g, const ff_family **fam, ff_err *e)
{
    *fam = ff_family_by_preset(preset);
    if (!*fam) {
        char known[512];
        ff_family_presets(known, sizeof known);
        return ff_fail(e, FF_EUSAGE, "unknown --arch %s (%s)", preset, known);
    }
    int rc = (*fam)->synth_preset(preset, size, g, e);
    snprintf(g->preset, sizeof g->preset, "%s", preset);
    return rc;
}

uint64_t synth_bytes(const ff_family *fam, const synth_geom *g)
{
    synth_list l = {0};
    uint64_t b = 0;
    if (fam->synth_tensors(g, &l, NULL) == FF_OK)
        for (size_t i = 0; i < l.n; i++)
            b += numel(&l.t[i]) * 2;
    free(l.t);
    return b;
}

/* splitmix64: cheap, seedable per chunk, so the bytes do not depend on the
 * thread count. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

#define CHUNK (1u << 20)   /* elements per independently seeded chunk */
#define BLOCK (32u * CHUNK)

typedef struct fill_job {
    const synth_tensor *t;
    uint64_t seed, first, n;   /* element range of this block */
    uint16_t *buf;
} fill_job;

static void fill_chunk(void *ctx, size_t c)
{
    fill_job *j = ctx;
    uint64_t begin = (uint64_t)c * CHUNK, end = begin + CHUNK < j->n ? begin + CHUNK : j->n;
    uint64_t s = j->seed ^ ((j->first + begin) / CHUNK) * 0x2545f4914f6cdd1dull;
    for (uint64_t i = begin; i < end; i++) {
        uint64_t r = mix(&s);
        /* sum of three 21-bit uniforms: mean 1.5, sd 0.5 -> roughly normal */
        float u = (float)(r & 0x1fffff) + (float)((r >> 21) & 0x1fffff) + (float)((r >> 42) & 0x1fffff);
        float z = (u * (1.0f / 2097152.0f) - 1.5f) * 2.0f;
        float v = j->t->init == SYNTH_ONES ? 1.0f + 0.05f * z : 0.02f * z;
        j->buf[i] = ff_f32_to_bf16(v);
    }
}

/* --source fp8-block: which tensors are stored FP8 (DeepSeek-V3's and
 * MiniMax-M2's published layouts: every decoder-layer projection and expert
 * w1/w2/w3, not the router, the embeddings, the norms or lm_head). */
static int is_fp8(const synth_tensor *t)
{
    size_t n = strlen(t->name);
    if (t->ndim != 2 || strncmp(t->name, "model.layers.", 13) != 0 || n < 8 || strcmp(t->name + n - 7, ".weight") != 0)
        return 0;
    const char *last = t->name + n - 8;   /* the module's own name component */
    while (last > t->name && *last != '.')
        last--;
    const char *proj = strstr(last, "proj");   /* q_a_proj, kv_a_proj_with_mqa, eh_proj, ... */
    int w123 = last[0] == '.' && last[1] == 'w' && last[2] >= '1' && last[2] <= '3' && last[3] == '.';
    return w123 || (proj && proj < t->name + n - 7);
}

#define FP8_BLK 128

/* One FP8-block tensor: its bf16 values (the same generator), then per
 * 128x128 block (edge blocks partial) scale = amax / 448 (1 for an all-zero
 * block), q = e4m3(w / scale), weight_scale_inv = scale: what
 * tests/conformance/t_deepseek_fp8.py does with torch. */
static int write_fp8(const synth_tensor *t, shard_set *ss, size_t out, ff_pool *pool, uint64_t seed, ff_err *e)
{
    uint64_t N = (uint64_t)t->shape[0], K = (uint64_t)t->shape[1], total = N * K;
    uint64_t sr = (N + FP8_BLK - 1) / FP8_BLK, sc = (K + FP8_BLK - 1) / FP8_BLK;
    uint16_t *w = malloc(total * 2 + 1);
    uint8_t *q = malloc(total + 1);
    float *s = malloc(sr * sc * sizeof *s + 1);
    int rc = w && q && s ? FF_OK : ff_fail(e, FF_EIO, "out of memory");
    for (uint64_t first = 0; rc == FF_OK && first < total; first += BLOCK) {
        fill_job j = {.t = t, .seed = hash_name(t->name, seed), .first = first,
                      .n = total - first < BLOCK ? total - first : BLOCK, .buf = w + first};
        pool_run(pool, (j.n + CHUNK - 1) / CHUNK, fill_chunk, &j);
    }
    for (uint64_t br = 0; rc == FF_OK && br < sr; br++)
        for (uint64_t bc = 0; bc < sc; bc++) {
            uint64_t r1 = (br + 1) * FP8_BLK < N ? (br + 1) * FP8_BLK : N;
            uint64_t c1 = (bc + 1) * FP8_BLK < K ? (bc + 1) * FP8_BLK : K;
            float amax = 0.0f;
            for (uint64_t r = br * FP8_BLK; r < r1; r++)
                for (uint64_t c = bc * FP8_BLK; c < c1; c++) {
                    float v = fabsf(ff_bf16_to_f32(w[r * K + c]));
                    amax = v > amax ? v : amax;
                }
            float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
            s[br * sc + bc] = scale;
            for (uint64_t r = br * FP8_BLK; r < r1; r++)
                for (uint64_t c = bc * FP8_BLK; c < c1; c++) {
                    float v = ff_bf16_to_f32(w[r * K + c]) / scale;
                    v = v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v;
                    q[r * K + c] = ff_f32_to_e4m3(v);
                }
        }
    if (rc == FF_OK) {
        size_t k = ss->out_shard[out];
        rc = st_pwrite_all(ss->fds[k], ss->paths[k], q, total, ss->out_abs[out], e);
        ss->bytes_written += total;
    }
    if (rc == FF_OK) {
        size_t k = ss->out_shard[out + 1];
        rc = st_pwrite_all(ss->fds[k], ss->paths[k], s, sr * sc * sizeof *s, ss->out_abs[out + 1], e);
        ss->bytes_written += sr * sc * sizeof *s;
    }
    free(w);
    free(q);
    free(s);
    return rc;
}

static int write_tensors(const synth_list *l, shard_set *ss, ff_pool *pool, uint64_t seed, int fp8, ff_err *e)
{
    uint16_t *buf = malloc((size_t)BLOCK * 2);
    if (!buf)
        return ff_fail(e, FF_EIO, "out of memory");
    int rc = FF_OK;
    size_t out = 0;   /* output index of tensor i (an FP8 one is two outputs) */
    for (size_t i = 0; i < l->n && rc == FF_OK; out++, i++) {
        if (fp8 && is_fp8(&l->t[i])) {
            rc = write_fp8(&l->t[i], ss, out++, pool, seed, e);
            continue;
        }
        uint64_t total = numel(&l->t[i]);
        for (uint64_t first = 0; first < total && rc == FF_OK; first += BLOCK) {
            fill_job j = {.t = &l->t[i], .seed = hash_name(l->t[i].name, seed), .first = first,
                          .n = total - first < BLOCK ? total - first : BLOCK, .buf = buf};
            pool_run(pool, (j.n + CHUNK - 1) / CHUNK, fill_chunk, &j);
            uint64_t off = first * 2;
            size_t k = ss->out_shard[out];
            rc = st_pwrite_all(ss->fds[k], ss->paths[k], buf, j.n * 2, ss->out_abs[out] + off, e);
            ss->bytes_written += j.n * 2;
        }
    }
    free(buf);
    return rc;
}

/* Extends each shard to its full size without writing: a hole reads as zeros. */
static int size_sparse(shard_set *ss, ff_err *e)
{
    for (size_t k = 0; k < ss->nshards; k++)
        if (ftruncate(ss->fds[k], (off_t)ss->shard_bytes[k]) != 0)
            return ff_fail(e, FF_EIO, "%s: cannot size: %s", ss->paths[k], strerror(errno));
    return FF_OK;
}

int synth_write(const ff_family *fam, const synth_geom *g, const char *out_dir, const synth_opts *o, ff_err *e)
{
    synth_list l = {0};
    int rc = fam->synth_tensors(g, &l, e);
    st_out *outs = rc ? NULL : calloc(l.n ? 2 * l.n : 1, sizeof *outs);
    char (*scale_names)[192] = rc || !o->fp8_block ? NULL : calloc(l.n ? l.n : 1, sizeof *scale_names);
    if (!rc && (!outs || (o->fp8_block && !scale_names)))
        rc = ff_fail(e, FF_EIO, "out of memory");
    size_t nouts = 0;
    for (size_t i = 0; !rc && i < l.n; i++) {
        st_out *x = &outs[nouts++];
        x->name = l.t[i].name;
        x->dtype = FF_DT_BF16;
        x->ndim = l.t[i].ndim;
        memcpy(x->shape, l.t[i].shape, sizeof l.t[i].shape);
        x->nbytes = numel(&l.t[i]) * 2;
        if (!o->fp8_block || !is_fp8(&l.t[i]))
            continue;
        x->dtype = FF_DT_F8_E4M3;
        x->nbytes = numel(&l.t[i]);
        st_out *y = &outs[nouts++];
        snprintf(scale_names[i], sizeof scale_names[i], "%.*s_scale_inv", (int)sizeof l.t[i].name, l.t[i].name);
        y->name = scale_names[i];
        y->dtype = FF_DT_F32;
        y->ndim = 2;
        y->shape[0] = (l.t[i].shape[0] + FP8_BLK - 1) / FP8_BLK;
        y->shape[1] = (l.t[i].shape[1] + FP8_BLK - 1) / FP8_BLK;
        y->nbytes = (uint64_t)y->shape[0] * (uint64_t)y->shape[1] * 4;
    }
    ckpt_writer *w = NULL;
    ff_pool *pool = NULL;
    if (!rc && !(w = ckpt_writer_begin(out_dir, o->force, NULL, e)))
        rc = e->code;
    if (!rc)
        rc = ckpt_writer_layout(w, outs, nouts, o->shard_size, e);
    if (!rc && o->sparse) {
        rc = size_sparse(ckpt_writer_shards(w), e);
    } else if (!rc) {
        pool = pool_create(o->threads);
        rc = write_tensors(&l, ckpt_writer_shards(w), pool, g->seed, o->fp8_block, e);
    }
    json_t *cfg = rc ? NULL : fam->synth_config(g);
    if (cfg && o->fp8_block) {
        /* DeepSeek-V3's published quantization_config */
        json_t *q = json_object(), *bs = json_array();
        json_object_set_new(q, "activation_scheme", json_string("dynamic"));
        json_object_set_new(q, "fmt", json_string("e4m3"));
        json_object_set_new(q, "quant_method", json_string("fp8"));
        json_array_append_new(bs, json_integer(FP8_BLK));
        json_array_append_new(bs, json_integer(FP8_BLK));
        json_object_set_new(q, "weight_block_size", bs);
        json_object_set_new(cfg, "quantization_config", q);
    }
    if (!rc)
        rc = cfg ? ckpt_writer_close(w, cfg, NULL, 0, e) : ff_fail(e, FF_EIO, "out of memory");
    json_decref(cfg);
    if (!rc)
        rc = fam->synth_aux(g, ckpt_writer_dir(w), e);
    if (!rc)
        rc = ckpt_writer_commit(w, e);
    ckpt_writer_free(w);
    pool_destroy(pool);
    free(outs);
    free(scale_names);
    free(l.t);
    return rc;
}

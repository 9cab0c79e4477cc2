/* The merge: W' = W + scale * (B @ A), in f32 from the base's values, rounded
 * once to the base dtype. The operation order is PEFT's (B @ A first, then the
 * scaling, then the add), so the only difference from merge_and_unload with
 * f32 adapter weights is the summation order inside the r-term dot product. */
#include "lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lora_simd.h"
#include "threadpool.h"

float lora_load(const void *p, ff_dtype t, uint64_t i)
{
    if (t != FF_DT_F32) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)p + 2 * i, 2);
        return t == FF_DT_BF16 ? ff_bf16_to_f32(h) : ff_f16_to_f32(h);
    }
    float f;
    memcpy(&f, (const uint8_t *)p + 4 * i, 4);
    return f;
}

static float *load_f32(const ckpt *c, const ckpt_tensor *t)
{
    uint64_t n = st_numel(t->st);
    float *f = malloc((n ? n : 1) * sizeof *f);
    const void *p = ckpt_data(c, t);
    for (uint64_t i = 0; f && i < n; i++)
        f[i] = lora_load(p, t->st->dtype, i);
    return f;
}

static void store(void *out, ff_dtype t, uint64_t i, float v)
{
    switch (t) {
    case FF_DT_BF16: ((uint16_t *)out)[i] = ff_f32_to_bf16(v); break;
    case FF_DT_F16: ((uint16_t *)out)[i] = ff_f32_to_f16(v); break;
    default: ((float *)out)[i] = v; break;
    }
}

/* B^T (r x out): with fan_in_fan_out a weight row is one input, so the
 * delta row is A[:, i] against B^T. */
static float *transpose(const float *b, uint64_t out, int64_t r)
{
    float *t = malloc(out * (uint64_t)r * sizeof *t + 1);
    for (uint64_t o = 0; t && o < out; o++)
        for (int64_t k = 0; k < r; k++)
            t[(uint64_t)k * out + o] = b[o * (uint64_t)r + (uint64_t)k];
    return t;
}

/* Rows a task merges: 16 rows of a 5376-wide weight are 172 KB of bf16 in
 * and out, and B @ A's r rows of A stay in the core's cache across them. */
#define MERGE_ROWS 16

typedef struct merge_job {
    const lora_module *m;
    const lora_kernels *k;
    const void *w;
    void *out;
    const float *a, *b, *bt;    /* bt: B^T, with fan_in_fan_out */
    uint64_t rows, cols, in;
    uint64_t *changed;          /* per task */
    float *max_abs;             /* per task */
    int *oom;                   /* per task */
} merge_job;

/* A weight row's merged values from its delta row acc. */
static void finish_row(const merge_job *j, uint64_t i, const float *acc, uint64_t *changed, float *max_abs)
{
    ff_dtype t = j->m->base->st->dtype;
    uint64_t at = i * j->cols;
    if (t == FF_DT_BF16) {
        *changed += j->k->apply_bf16((const uint16_t *)j->w + at, acc, j->m->scale, j->cols, (uint16_t *)j->out + at,
                                     max_abs);
        return;
    }
    for (uint64_t c = 0; c < j->cols; c++) {
        float d = acc[c] * j->m->scale, base = lora_load(j->w, t, at + c);
        store(j->out, t, at + c, base + d);
        *changed += ff_round_to(t, base + d) != base;
        *max_abs = fabsf(d) > *max_abs ? fabsf(d) : *max_abs;
    }
}

static void merge_task(void *ctx, size_t t)
{
    merge_job *j = ctx;
    int64_t r = j->m->r;
    uint64_t r0 = (uint64_t)t * MERGE_ROWS, r1 = r0 + MERGE_ROWS < j->rows ? r0 + MERGE_ROWS : j->rows;
    float *acc = malloc(j->cols * sizeof *acc + 1), *u = malloc((uint64_t)r * sizeof *u + 1);
    j->oom[t] = !acc || !u;
    for (uint64_t i = r0; !j->oom[t] && i < r1; i++) {
        if (j->bt) {
            for (int64_t k = 0; k < r; k++)
                u[k] = j->a[(uint64_t)k * j->in + i];
            j->k->delta(u, j->bt, r, j->cols, acc);
        } else {
            j->k->delta(j->b + i * (uint64_t)r, j->a, r, j->cols, acc);
        }
        finish_row(j, i, acc, &j->changed[t], &j->max_abs[t]);
    }
    free(acc);
    free(u);
}

/* Tasks on l->pool when there is one, in any order: each writes its own
 * rows and figures, summed in task order after. */
static int run_merge(const lora_adapter *l, merge_job *j, uint64_t *changed, float *max_delta, ff_err *e)
{
    size_t tasks = (size_t)((j->rows + MERGE_ROWS - 1) / MERGE_ROWS);
    j->changed = calloc(tasks + 1, sizeof *j->changed);
    j->max_abs = calloc(tasks + 1, sizeof *j->max_abs);
    j->oom = calloc(tasks + 1, sizeof *j->oom);
    int rc = j->changed && j->max_abs && j->oom ? FF_OK : ff_oom(e, "out of memory merging %s", j->m->module);
    if (!rc && l->pool)
        pool_run(l->pool, tasks, merge_task, j);
    for (size_t t = 0; !rc && !l->pool && t < tasks; t++)
        merge_task(j, t);
    for (size_t t = 0; !rc && t < tasks; t++) {
        if (j->oom[t])
            rc = ff_oom(e, "out of memory merging %s", j->m->module);
        *changed += j->changed[t];
        *max_delta = j->max_abs[t] > *max_delta ? j->max_abs[t] : *max_delta;
    }
    free(j->changed);
    free(j->max_abs);
    free(j->oom);
    return rc;
}

int lora_merge_module(const lora_adapter *l, const lora_module *m, const void *w, void *out,
                      uint64_t *changed, float *max_delta, ff_err *e)
{
    const st_tensor *ws = m->base->st;
    float *a = load_f32(&l->ck, m->a), *b = load_f32(&l->ck, m->b);
    float *bt = l->fan_in_fan_out && b ? transpose(b, (uint64_t)m->b->st->shape[0], m->r) : NULL;
    merge_job j = {.m = m, .k = lora_kernels_best(), .w = w, .out = out, .a = a, .b = b, .bt = bt,
                   .rows = (uint64_t)ws->shape[0], .cols = (uint64_t)ws->shape[1],
                   .in = (uint64_t)m->a->st->shape[1]};
    *changed = 0;
    *max_delta = 0;
    int rc = !a || !b || (l->fan_in_fan_out && !bt) ? ff_oom(e, "out of memory merging %s", m->module)
                                                     : run_merge(l, &j, changed, max_delta, e);
    free(a);
    free(b);
    free(bt);
    return rc;
}

static lora_module *module_for(lora_adapter *l, const ckpt_tensor *t)
{
    for (size_t i = 0; i < l->nmods; i++)
        if (l->mods[i].base == t)
            return &l->mods[i];
    return NULL;
}

int lora_produce(lora_adapter *l, const ckpt_tensor *t, void **buf, ff_err *e)
{
    *buf = NULL;
    lora_module *m = module_for(l, t);
    if (!m)
        return FF_OK;
    if (m->merged)
        return ff_fail(e, FF_EIO, "internal: adapter module %s merged twice", m->module);
    if (!l->pool)
        l->pool = pool_create(0);   /* none: the merge runs on this thread */
    uint64_t bytes = t->st->end - t->st->begin;
    void *out = l->spare && l->spare_bytes >= bytes ? l->spare : malloc(bytes + 1);
    if (out == l->spare)
        l->spare = NULL;
    if (!out)
        return ff_oom(e, "out of memory merging %s", m->module);
    int rc = lora_merge_module(l, m, ckpt_data(l->base, t), out, &m->changed, &m->max_delta, e);
    uint64_t n = st_numel(t->st);
    if (rc == FF_OK && m->changed == 0)
        rc = ff_fail(e, FF_EIO,
                     "adapter module %s: the merged weight equals the base in all %llu elements "
                     "(max |scale * B @ A| = %.3g, below %s resolution): the adapter changes nothing there",
                     m->module, (unsigned long long)n, m->max_delta, ff_dtype_name(t->st->dtype));
    if (rc) {
        free(out);
        return rc;
    }
    m->merged = 1;
    l->nmerged++;
    l->merged_elems += n;
    l->changed_elems += m->changed;
    *buf = out;
    return FF_OK;
}

void lora_give_back(lora_adapter *l, void *buf, uint64_t bytes)
{
    if (!buf || (l->spare && l->spare_bytes >= bytes)) {
        free(buf);
        return;
    }
    free(l->spare);
    l->spare = buf;
    l->spare_bytes = bytes;
}

int lora_finish(lora_adapter *l, ff_err *e)
{
    if (l->nmerged == l->nmods)
        return FF_OK;
    for (size_t i = 0; i < l->nmods; i++)
        if (!l->mods[i].merged)
            return ff_fail(e, FF_EIO, "merged %zu of %zu adapter modules (%zu tensors); %s was never reached",
                           l->nmerged, l->nmods, l->ntensors, l->mods[i].module);
    return FF_OK;
}

static int source_load(void *ctx, const ckpt_tensor *t, void **buf, ff_err *e)
{
    return lora_produce(ctx, t, buf, e);
}

static int source_finish(void *ctx, ff_err *e) { return lora_finish(ctx, e); }

void lora_quant_source(lora_adapter *l, quant_source *qs)
{
    qs->ctx = l;
    qs->load = source_load;
    qs->finish = source_finish;
}

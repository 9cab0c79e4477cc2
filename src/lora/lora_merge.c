/* The merge: W' = W + scale * (B @ A), in f32 from the base's values, rounded
 * once to the base dtype. The operation order is PEFT's (B @ A first, then the
 * scaling, then the add), so the only difference from merge_and_unload with
 * f32 adapter weights is the summation order inside the r-term dot product. */
#include "lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* acc[j] = sum_k u[k] * V[k][j], k in order (V is r x n, row-major). */
static void row_delta(const float *u, const float *V, int64_t r, uint64_t n, float *acc)
{
    memset(acc, 0, n * sizeof *acc);
    for (int64_t k = 0; k < r; k++) {
        const float *v = V + (uint64_t)k * n;
        float uk = u[k];
        for (uint64_t j = 0; j < n; j++)
            acc[j] = fmaf(uk, v[j], acc[j]);
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

int lora_merge_module(const lora_adapter *l, const lora_module *m, const void *w, void *out,
                      uint64_t *changed, float *max_delta, ff_err *e)
{
    const st_tensor *ws = m->base->st;
    uint64_t rows = (uint64_t)ws->shape[0], cols = (uint64_t)ws->shape[1], in = (uint64_t)m->a->st->shape[1];
    int64_t r = m->r;
    float *a = load_f32(&l->ck, m->a), *b = load_f32(&l->ck, m->b);
    float *bt = l->fan_in_fan_out && b ? transpose(b, (uint64_t)m->b->st->shape[0], r) : NULL;
    float *acc = malloc(cols * sizeof *acc + 1), *u = malloc((uint64_t)r * sizeof *u + 1);
    int rc = FF_OK;
    if (!a || !b || !acc || !u || (l->fan_in_fan_out && !bt))
        rc = ff_oom(e, "out of memory merging %s", m->module);
    *changed = 0;
    *max_delta = 0;
    for (uint64_t i = 0; rc == FF_OK && i < rows; i++) {
        if (l->fan_in_fan_out) {
            for (int64_t k = 0; k < r; k++)
                u[k] = a[(uint64_t)k * in + i];
            row_delta(u, bt, r, cols, acc);
        } else {
            row_delta(b + i * (uint64_t)r, a, r, cols, acc);
        }
        for (uint64_t j = 0; j < cols; j++) {
            float d = acc[j] * m->scale, base = lora_load(w, ws->dtype, i * cols + j);
            store(out, ws->dtype, i * cols + j, base + d);
            *changed += ff_round_to(ws->dtype, base + d) != base;
            *max_delta = fabsf(d) > *max_delta ? fabsf(d) : *max_delta;
        }
    }
    free(a);
    free(b);
    free(bt);
    free(acc);
    free(u);
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
    void *out = malloc(t->st->end - t->st->begin + 1);
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

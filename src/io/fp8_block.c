#include "fp8_block.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "jsonio.h"
#include "qsource_simd.h"
#include "threadpool.h"

int fp8b_config(const json_t *config, const char **why)
{
    const json_t *q = config ? json_object_get(config, "quantization_config") : NULL;
    *why = NULL;
    if (!q || json_is_null(q))
        return 0;   /* null is none: a config saved with the attribute set to None */
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (!method || strcmp(method, "fp8") != 0) {
        *why = "quant_method is not fp8";
        return -1;
    }
    const json_t *bs = json_object_get(q, "weight_block_size");
    if (!bs || !json_is_array(bs) || json_array_size(bs) != 2 ||
        json_integer_value(json_array_get(bs, 0)) != FP8B_BLOCK ||
        json_integer_value(json_array_get(bs, 1)) != FP8B_BLOCK) {
        *why = "fp8 without weight_block_size [128, 128] (per-tensor or per-channel FP8 is not decoded)";
        return -1;
    }
    const char *fmt = json_string_value(json_object_get(q, "fmt"));
    if (fmt && strcmp(fmt, "e4m3") != 0) {
        *why = "fp8 fmt is not e4m3";
        return -1;
    }
    const char *sf = json_string_value(json_object_get(q, "scale_fmt"));
    if (sf && strcmp(sf, "ue8m0") == 0) {
        *why = "ue8m0 scales are not decoded";
        return -1;
    }
    return 1;
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static const ckpt_tensor *sibling_scale(const ckpt *c, const char *name)
{
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, ".weight") != 0)
        return NULL;
    return ckpt_find_join(c, name, n - 7, "." FP8B_SCALE_SUFFIX);
}

int fp8b_scale_of(const ckpt *c, const ckpt_tensor *t, const ckpt_tensor **scale, ff_err *e)
{
    *scale = NULL;
    if (t->st->dtype != FF_DT_F8_E4M3)
        return FF_OK;
    const ckpt_tensor *s = sibling_scale(c, t->st->name);
    if (!s)
        return FF_OK;
    if (t->st->ndim != 2)
        return ff_fail(e, FF_EIO, "%s: tensor %s: an FP8-block weight must be 2-D", ckpt_path(c, t), t->st->name);
    uint64_t N = (uint64_t)t->st->shape[0], K = (uint64_t)t->st->shape[1];
    if (s->st->dtype != FF_DT_F32 || s->st->ndim != 2 || (uint64_t)s->st->shape[0] != cdiv(N, FP8B_BLOCK) ||
        (uint64_t)s->st->shape[1] != cdiv(K, FP8B_BLOCK)) {
        char got[ST_MAX_DIMS * 24 + 4];   /* every dimension: a 3-D scale printed as 2-D read as the expected one */
        return ff_fail(e, FF_EIO, "%s: tensor %s: %s is %s %s, expected F32 [%llu, %llu] for a [%llu, %llu] weight",
                       ckpt_path(c, s), s->st->name, FP8B_SCALE_SUFFIX, ff_dtype_name(s->st->dtype),
                       st_shape_str(s->st->shape, s->st->ndim, got, sizeof got),
                       (unsigned long long)cdiv(N, FP8B_BLOCK), (unsigned long long)cdiv(K, FP8B_BLOCK),
                       (unsigned long long)N, (unsigned long long)K);
    }
    *scale = s;
    return FF_OK;
}

int fp8b_is_scale(const ckpt *c, const char *name)
{
    static const char suf[] = "." FP8B_SCALE_SUFFIX;
    size_t n = strlen(name), k = sizeof suf - 1;
    if (n <= k || strcmp(name + n - k, suf) != 0)
        return 0;
    const ckpt_tensor *w = ckpt_find_join(c, name, n - k, ".weight");
    return w && w->st->dtype == FF_DT_F8_E4M3;
}

/* e4m3 -> f32 is exact: a table of the 256 values. */
static float k_lut[256];
static pthread_once_t k_once = PTHREAD_ONCE_INIT;
static void lut_init(void)
{
    for (int i = 0; i < 256; i++)
        k_lut[i] = ff_e4m3_to_f32((uint8_t)i);
}

void fp8b_decode_rows_f32(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                          float *out)
{
    pthread_once(&k_once, lut_init);
    uint64_t sc = cdiv(K, FP8B_BLOCK);
    (void)N;
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *row = w + (r0 + r) * K;
        const float *srow = s + ((r0 + r) / FP8B_BLOCK) * sc;
        float *o = out + r * K;
        for (uint64_t b = 0; b < sc; b++) {
            /* torch: q.to(float32) * s (f32), one IEEE multiply, no FMA */
            float scale = srow[b];
            uint64_t c0 = b * FP8B_BLOCK, c1 = c0 + FP8B_BLOCK < K ? c0 + FP8B_BLOCK : K;
            for (uint64_t col = c0; col < c1; col++)
                o[col] = k_lut[row[col]] * scale;
        }
    }
}

void fp8b_decode_rows(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                      uint16_t *out)
{
    pthread_once(&k_once, lut_init);
    uint64_t sc = cdiv(K, FP8B_BLOCK);
    (void)N;
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *row = w + (r0 + r) * K;
        const float *srow = s + ((r0 + r) / FP8B_BLOCK) * sc;
        uint16_t *o = out + r * K;
        for (uint64_t b = 0; b < sc; b++) {
            float scale = srow[b];
            uint64_t c0 = b * FP8B_BLOCK, c1 = c0 + FP8B_BLOCK < K ? c0 + FP8B_BLOCK : K;
            for (uint64_t col = c0; col < c1; col++) {
                float v = k_lut[row[col]] * scale;   /* the f32 product, then one rounding */
                o[col] = ff_f32_to_bf16(v);
            }
        }
    }
}

typedef struct dec_job {
    const uint8_t *w;
    const float *s;
    uint64_t N, K;
    uint16_t *out;
} dec_job;

/* one 128-row block of scales per task, on the fastest decoder this CPU
 * runs (each gives fp8b_decode_rows's bytes) */
static void dec_task(void *ctx, size_t t)
{
    dec_job *j = ctx;
    uint64_t r0 = (uint64_t)t * FP8B_BLOCK, n = j->N - r0 < FP8B_BLOCK ? j->N - r0 : FP8B_BLOCK;
    qs_decoders_best()->fp8(j->w, j->s, j->N, j->K, r0, n, j->out + r0 * j->K);
}

int fp8b_decode_into(const ckpt *c, const ckpt_tensor *t, const ckpt_tensor *scale, ff_pool *pool, uint16_t *out,
                     ff_err *e)
{
    uint64_t N = (uint64_t)t->st->shape[0], K = (uint64_t)t->st->shape[1];
    /* scales are read through memcpy: the data section need not be 4-aligned */
    uint64_t ns = (uint64_t)scale->st->shape[0] * (uint64_t)scale->st->shape[1];
    float *s = malloc(ns > 0 ? ns * sizeof *s : 1);
    if (!s)
        return ff_fail(e, FF_EIO, "out of memory decoding %s", t->st->name);
    memcpy(s, ckpt_data(c, scale), ns * sizeof *s);
    dec_job j = {.w = ckpt_data(c, t), .s = s, .N = N, .K = K, .out = out};
    size_t tasks = (size_t)((N + FP8B_BLOCK - 1) / FP8B_BLOCK);
    if (pool && N * K >= (1u << 18))
        pool_run(pool, tasks, dec_task, &j);
    else
        for (size_t i = 0; i < tasks; i++)
            dec_task(&j, i);
    free(s);
    /* the FP8 bytes are consumed: drop them from this mapping now rather
     * than when the executor releases the item, so a unit holds its decoded
     * copy, not both (the page cache keeps them) */
    st_drop_tensor(&c->files[t->file], t->st);
    return FF_OK;
}

int fp8b_decode_tensor(const ckpt *c, const ckpt_tensor *t, const ckpt_tensor *scale, ff_pool *pool, uint16_t **out,
                       ff_err *e)
{
    uint64_t N = (uint64_t)t->st->shape[0], K = (uint64_t)t->st->shape[1];
    *out = malloc(N * K > 0 ? N * K * 2 : 1);
    if (!*out)
        return ff_fail(e, FF_EIO, "out of memory decoding %s", t->st->name);
    int rc = fp8b_decode_into(c, t, scale, pool, *out, e);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

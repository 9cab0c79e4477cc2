#include "decode_fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"

static const ckpt_tensor *find_join(const ckpt *c, const char *stem, size_t len, const char *suffix)
{
    return ckpt_find_join(c, stem, len, suffix);
}

const char *fp8_module_of(const ckpt *c, const char *tensor_name, char *buf, size_t n)
{
    size_t len = strlen(tensor_name);
    size_t stem;
    if (len > 7 && strcmp(tensor_name + len - 7, ".weight") == 0)
        stem = len - 7;
    else if (len > 13 && strcmp(tensor_name + len - 13, ".weight_scale") == 0)
        stem = len - 13;
    else
        return NULL;
    if (stem + 1 > n || !find_join(c, tensor_name, stem, ".weight") || !find_join(c, tensor_name, stem, ".weight_scale") ||
        find_join(c, tensor_name, stem, "." DQ_PACKED) || find_join(c, tensor_name, stem, "." DQ_GLOBAL))
        return NULL;
    memcpy(buf, tensor_name, stem);
    buf[stem] = 0;
    return buf;
}

int fp8_part(const ckpt *c, const char *tensor_name)
{
    char small[8];
    size_t len = strlen(tensor_name);
    char *buf = len < sizeof small ? small : malloc(len + 1);
    int part = 0;
    if (buf && fp8_module_of(c, tensor_name, buf, len + 1))
        part = strcmp(tensor_name + len - 7, ".weight") == 0 ? 1 : 2;
    if (buf != small)
        free(buf);
    return part;
}

static int scale_dtype_ok(ff_dtype t) { return t == FF_DT_BF16 || t == FF_DT_F16 || t == FF_DT_F32; }

int fp8_find(const ckpt *c, const char *module, fp8_module *m, ff_err *e)
{
    size_t len = strlen(module);
    memset(m, 0, sizeof *m);
    m->weight = find_join(c, module, len, ".weight");
    m->scale = find_join(c, module, len, ".weight_scale");
    if (!m->weight || !m->scale)
        return ff_fail(e, FF_EIO, "FP8 module %s lacks its %s", module, m->weight ? "weight_scale" : "weight");
    const st_tensor *w = m->weight->st, *s = m->scale->st;
    if (w->dtype != FF_DT_F8_E4M3 || w->ndim != 2)
        return ff_fail(e, FF_EIO, "%s: tensor %s: FP8 module weight is %s %dD, expected F8_E4M3 [out, in] beside its "
                                  "weight_scale", ckpt_path(c, m->weight), w->name, ff_dtype_name(w->dtype), w->ndim);
    if (!scale_dtype_ok(s->dtype) || !(s->ndim == 1 || (s->ndim == 2 && s->shape[1] == 1)) ||
        s->shape[0] != w->shape[0])
        return ff_fail(e, FF_EIO, "%s: tensor %s: FP8 channel scale is %s %dD [%lld%s], expected BF16/F16/F32 "
                                  "[%lld, 1]", ckpt_path(c, m->scale), s->name, ff_dtype_name(s->dtype), s->ndim,
                       (long long)(s->ndim ? s->shape[0] : 0), s->ndim == 2 ? ", ..." : "", (long long)w->shape[0]);
    m->module = strdup(module);
    if (!m->module)
        return ff_oom(e, "out of memory");
    m->rows = (uint64_t)w->shape[0];
    m->cols = (uint64_t)w->shape[1];
    m->dtype = s->dtype;
    return FF_OK;
}

void fp8_module_free(fp8_module *m)
{
    free(m->module);
    memset(m, 0, sizeof *m);
}

uint64_t fp8_bad_scales(const ckpt *c, const fp8_module *m, uint64_t *first, float *val)
{
    const uint8_t *s = ckpt_data(c, m->scale);
    uint64_t bad = 0;
    for (uint64_t r = 0; r < m->rows; r++) {
        float x = ff_load_f32(s, m->dtype, r);
        if (!(isfinite(x) && x > 0) && !bad++) {
            *first = r;
            *val = x;
        }
    }
    return bad;
}

uint64_t fp8_nan_codes(const ckpt *c, const fp8_module *m, uint64_t *first)
{
    const uint8_t *w = ckpt_data(c, m->weight);
    uint64_t bad = 0, n = m->rows * m->cols;
    for (uint64_t i = 0; i < n; i++)
        if ((w[i] & 0x7f) == 0x7f && !bad++)
            *first = i;
    return bad;
}

/* One decoded element as a float holding a value of m->dtype. */
static inline float decode_one(uint8_t code, float scale, ff_dtype t)
{
    return ff_round_to(t, ff_e4m3_to_f32(code) * scale);
}

static void store(void *out, ff_dtype t, uint64_t i, float v)
{
    uint16_t h;
    switch (t) {
    case FF_DT_BF16: h = ff_f32_to_bf16(v); memcpy((uint8_t *)out + 2 * i, &h, 2); break;
    case FF_DT_F16: h = ff_f32_to_f16(v); memcpy((uint8_t *)out + 2 * i, &h, 2); break;
    default: memcpy((uint8_t *)out + 4 * i, &v, 4); break;
    }
}

void fp8_decode_rows(const ckpt *c, const fp8_module *m, uint64_t row, uint64_t n, void *out)
{
    const uint8_t *w = ckpt_data(c, m->weight), *s = ckpt_data(c, m->scale);
    for (uint64_t r = 0; r < n; r++) {
        float scale = ff_load_f32(s, m->dtype, row + r);
        const uint8_t *codes = w + (row + r) * m->cols;
        for (uint64_t k = 0; k < m->cols; k++)
            store(out, m->dtype, r * m->cols + k, ff_e4m3_to_f32(codes[k]) * scale);
    }
}

void fp8_error_rows(const ckpt *c, const fp8_module *m, uint64_t row, uint64_t n, const uint8_t *src, ff_dtype sd,
                    double *se, double *ss, uint64_t *nonfinite)
{
    const uint8_t *w = ckpt_data(c, m->weight), *s = ckpt_data(c, m->scale);
    *se = *ss = 0;
    for (uint64_t r = 0; r < n; r++) {
        float scale = ff_load_f32(s, m->dtype, row + r);
        const uint8_t *codes = w + (row + r) * m->cols;
        double rse = 0, rss = 0;
        for (uint64_t k = 0; k < m->cols; k++) {
            float d = decode_one(codes[k], scale, m->dtype);
            double x = ff_load_f32(src, sd, r * m->cols + k);
            if (!isfinite(d)) {
                (*nonfinite)++;
                continue;
            }
            rse += (d - x) * (d - x);
            rss += x * x;
        }
        *se += rse;
        *ss += rss;
    }
}

void fp8_drop_rows(const ckpt *c, const fp8_module *m, uint64_t row, uint64_t n)
{
    dq_drop(c, m->weight, row * m->cols, n * m->cols);
    dq_drop(c, m->scale, row * ff_dtype_size(m->dtype), n * ff_dtype_size(m->dtype));
}

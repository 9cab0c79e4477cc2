#include "decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvfp4.h"
#include "nvfp4_simd.h"
#include "vectorize.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Ends with ".suffix": a whole last name component, not any tail. */
static int ends_with_component(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a > b && s[a - b - 1] == '.' && strcmp(s + a - b, suffix) == 0;
}

const char *dq_module_of(const char *tensor_name, char *buf, size_t n)
{
    if (!ends_with_component(tensor_name, DQ_PACKED))
        return NULL;
    size_t len = strlen(tensor_name) - strlen(DQ_PACKED) - 1;
    if (len + 1 > n)
        return NULL;
    memcpy(buf, tensor_name, len);
    buf[len] = 0;
    return buf;
}

dq_part_kind dq_part(const ckpt *c, const char *tensor_name)
{
    static const char *const suffixes[] = {DQ_PACKED, DQ_SCALE, DQ_GLOBAL};
    for (size_t i = 0; i < 3; i++) {
        if (!ends_with_component(tensor_name, suffixes[i]))
            continue;
        if (i == 0)
            return DQ_PART_PACKED;
        size_t len = strlen(tensor_name) - strlen(suffixes[i]);
        return ckpt_find_join(c, tensor_name, len, DQ_PACKED) ? DQ_PART_SCALE : DQ_PART_NONE;
    }
    return DQ_PART_NONE;
}

/* "<mod>.<suffix>" -> "<mod>.<other>", looked up; NULL when absent. */
static const ckpt_tensor *sibling(const ckpt *c, const char *name, const char *suffix, const char *other)
{
    return ckpt_find_join(c, name, strlen(name) - strlen(suffix), other);
}

const char *dq_orphan_part(const ckpt *c, const char *tensor_name, char *mod, size_t n)
{
    static const char *const parts[] = {DQ_SCALE, DQ_GLOBAL};
    for (size_t i = 0; i < 2; i++) {
        if (!ends_with_component(tensor_name, parts[i]) || sibling(c, tensor_name, parts[i], DQ_PACKED))
            continue;
        snprintf(mod, n, "%.*s", (int)(strlen(tensor_name) - strlen(parts[i]) - 1), tensor_name);
        return parts[i];
    }
    return NULL;
}

const char *dq_stray_scale(const ckpt *c, const char *tensor_name)
{
    static const char *const strays[] = {"input_scale", "weight_scale_inv"};
    for (size_t i = 0; i < 2; i++)
        if (ends_with_component(tensor_name, strays[i]) && sibling(c, tensor_name, strays[i], DQ_PACKED))
            return strays[i];
    return NULL;
}

/* What code * (s / gs) gives under a bad global scale, for the message. */
static const char *bad_global_effect(float gs)
{
    if (isnan(gs) || gs == 0.0f)
        return "NaN and Inf";
    if (isinf(gs))
        return "zeros";
    return gs < 0.0f ? "weights of flipped sign" : "Inf";
}

int dq_check_global(const ckpt *c, const dq_module *m, float *gs, ff_err *e)
{
    memcpy(gs, ckpt_data(c, m->global), sizeof *gs);
    if (isnormal(*gs) && *gs > 0.0f)
        return FF_OK;
    return ff_fail(e, FF_EIO, "%s: tensor %s: global scale %g is not a positive, finite, normal number (its module "
                              "would decode to %s)", ckpt_path(c, m->global), m->global->st->name, (double)*gs,
                   bad_global_effect(*gs));
}

/* The smallest scale magnitude byte of n scales: branch-free, so it
 * vectorizes. */
VECTORIZE_LOOP static unsigned least_scale_magnitude(const uint8_t *scales, uint64_t n)
{
    uint8_t m = 0x7f;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t b = scales[i] & 0x7f;
        m = b < m ? b : m;
    }
    return m;
}

uint64_t dq_zero_scale_blocks(const ckpt *c, const dq_module *m, uint64_t *first)
{
    const uint8_t *packed = ckpt_data(c, m->packed), *scales = ckpt_data(c, m->scale);
    uint64_t blocks = m->rows * (m->cols / NVFP4_GROUP), n = 0;
    *first = UINT64_MAX;
    /* no zero scale, as nearly always: one vector pass instead of a branch
     * a block, on verify's serial thread (bench/serial.sh, the 2-layer
     * Gemma-4: 19 ms of the other core idle) */
    if (least_scale_magnitude(scales, blocks) > 0)
        return 0;
    for (uint64_t b = 0; b < blocks; b++) {
        if (scales[b] & 0x7f)
            continue;
        const uint8_t *p8 = packed + b * (NVFP4_GROUP / 2);
        int codes = 0;
        for (int i = 0; i < NVFP4_GROUP / 2; i++)
            codes |= p8[i] & 0x77;   /* a nonzero magnitude in either nibble */
        if (codes && n++ == 0)
            *first = b;
    }
    return n;
}

/* "<module>" + dot_suffix (".weight_packed"), whatever the module's length. */
static const ckpt_tensor *find_part(const ckpt *c, const char *module, const char *dot_suffix)
{
    return ckpt_find_join(c, module, strlen(module), dot_suffix);
}

int dq_find(const ckpt *c, const char *module, dq_module *m, ff_err *e)
{
    memset(m, 0, sizeof *m);
    m->packed = find_part(c, module, "." DQ_PACKED);
    m->scale = find_part(c, module, "." DQ_SCALE);
    m->global = find_part(c, module, "." DQ_GLOBAL);
    if (!m->packed || !m->scale || !m->global)
        return ff_fail(e, FF_EIO, "%s: quantized module lacks %s", module,
                       !m->packed ? DQ_PACKED : !m->scale ? DQ_SCALE : DQ_GLOBAL);
    const st_tensor *p = m->packed->st, *s = m->scale->st, *g = m->global->st;
    if (p->dtype != FF_DT_U8 || s->dtype != FF_DT_F8_E4M3 || g->dtype != FF_DT_F32)
        return ff_fail(e, FF_EIO, "%s: dtypes %s/%s/%s, expected U8/F8_E4M3/F32", module,
                       ff_dtype_name(p->dtype), ff_dtype_name(s->dtype), ff_dtype_name(g->dtype));
    if (p->ndim != 2 || s->ndim != 2 || st_numel(g) != 1)
        return ff_fail(e, FF_EIO, "%s: packed/scale must be 2-D and global scale one value", module);
    m->rows = (uint64_t)p->shape[0];
    m->cols = (uint64_t)p->shape[1] * 2;
    if ((uint64_t)s->shape[0] != m->rows || (uint64_t)s->shape[1] * NVFP4_GROUP != m->cols)
        return ff_fail(e, FF_EIO, "%s: weight_scale shape [%lld, %lld] does not fit packed [%lld, %lld]",
                       module, (long long)s->shape[0], (long long)s->shape[1],
                       (long long)p->shape[0], (long long)p->shape[1]);
    m->module = strdup(module);
    return m->module ? FF_OK : ff_oom(e, "out of memory");
}

void dq_module_free(dq_module *m)
{
    free(m->module);
    m->module = NULL;
}

void dq_table_init(dq_table *t, float global_scale)
{
    for (int s = 0; s < 256; s++) {
        /* the row kernel's e4m3(s) / gs, then code * eff: the same two roundings */
        float eff = ff_e4m3_to_f32((uint8_t)s) / global_scale;
        int ok = 1;
        for (int k = 0; k < 16; k++) {
            float v = nvfp4_code_value[k] * eff;
            t->val[s * 16 + k] = v;
            t->rnd[s * 16 + k] = ff_round_bf16(v);
            uint16_t b = ff_f32_to_bf16(v);
            t->lo[s * 16 + k] = (uint8_t)(b & 0xff);
            t->hi[s * 16 + k] = (uint8_t)(b >> 8);
            ok &= isfinite(v) != 0;
        }
        t->finite[s] = (unsigned char)ok;
    }
    t->bad_from = 0x80;
    for (unsigned s = 0; s < 256; s++)
        if (!t->finite[s] && (s & 0x7f) < t->bad_from)
            t->bad_from = s & 0x7f;
#if defined(__x86_64__)
    t->simd = nvfp4_cpu_avx512_ok() ? 2 : nvfp4_cpu_avx2_ok();
#else
    t->simd = 0;
#endif
}

static void groups_bf16_scalar(const dq_table *t, const uint8_t *packed, const uint8_t *scales, uint64_t groups,
                               uint16_t *out)
{
    for (uint64_t g = 0; g < groups; g++) {
        const uint8_t *lo = t->lo + scales[g] * 16, *hi = t->hi + scales[g] * 16;
        const uint8_t *p8 = packed + g * (NVFP4_GROUP / 2);
        for (int i = 0; i < NVFP4_GROUP / 2; i++) {
            out[g * NVFP4_GROUP + 2 * i] = (uint16_t)(lo[p8[i] & 15] | hi[p8[i] & 15] << 8);
            out[g * NVFP4_GROUP + 2 * i + 1] = (uint16_t)(lo[p8[i] >> 4] | hi[p8[i] >> 4] << 8);
        }
    }
}

#if defined(__x86_64__)
/* Each group: its 8 bytes spread to 16 nibble indices (low nibble first),
 * each looked up in the scale's 16 low and 16 high bytes; converting every
 * value to bf16 one by one was 64% of dequantize's samples. */
__attribute__((target("avx2"))) static void groups_bf16_avx2(const dq_table *t, const uint8_t *packed,
                                                             const uint8_t *scales, uint64_t groups,
                                                             uint16_t *out)
{
    const __m128i nib = _mm_set1_epi8(0x0f);
    for (uint64_t g = 0; g < groups; g++) {
        __m128i x = _mm_loadl_epi64((const __m128i *)(packed + g * (NVFP4_GROUP / 2)));
        __m128i idx = _mm_unpacklo_epi8(_mm_and_si128(x, nib), _mm_and_si128(_mm_srli_epi16(x, 4), nib));
        __m128i lo = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(t->lo + scales[g] * 16)), idx);
        __m128i hi = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(t->hi + scales[g] * 16)), idx);
        _mm_storeu_si128((__m128i *)(out + g * NVFP4_GROUP), _mm_unpacklo_epi8(lo, hi));
        _mm_storeu_si128((__m128i *)(out + g * NVFP4_GROUP + 8), _mm_unpackhi_epi8(lo, hi));
    }
}
#endif

void dq_groups_bf16(const dq_table *t, const uint8_t *packed, const uint8_t *scales, uint64_t groups, int simd,
                    uint16_t *out)
{
#if defined(__x86_64__)
    if (simd) {
        groups_bf16_avx2(t, packed, scales, groups, out);
        return;
    }
#endif
    (void)simd;
    groups_bf16_scalar(t, packed, scales, groups, out);
}

/* A group with a non-finite entry: counted element by element. */
static void count_bad(const float *v, const uint8_t *p8, uint64_t at, dq_stats *st)
{
    for (int i = 0; i < NVFP4_GROUP; i++) {
        float x = v[(i & 1) ? p8[i / 2] >> 4 : p8[i / 2] & 15];
        if (isfinite(x))
            continue;
        st->nonfinite++;
        if (at + (uint64_t)i < st->first_bad)
            st->first_bad = at + (uint64_t)i;
    }
}

void dq_decode_rows(const ckpt *c, const dq_module *m, const dq_table *t, uint64_t row, uint64_t n, float *f32,
                    uint16_t *bf16, dq_stats *st)
{
    uint64_t groups = n * (m->cols / NVFP4_GROUP), g0 = row * (m->cols / NVFP4_GROUP);
    const uint8_t *packed = (const uint8_t *)ckpt_data(c, m->packed) + g0 * (NVFP4_GROUP / 2);
    const uint8_t *scales = (const uint8_t *)ckpt_data(c, m->scale) + g0;
    /* No group to count when every scale lies below the first bad one (as
     * nearly always): group by group, this count was dequantize's serial
     * check of each module while the other core waited, and a second pass
     * in each of its tasks. */
    uint64_t counted = f32 || ff_e4m3_max_magnitude(scales, groups) >= t->bad_from ? groups : 0;
    for (uint64_t g = 0; g < counted; g++) {
        const float *v = t->val + scales[g] * 16;
        const uint8_t *p8 = packed + g * (NVFP4_GROUP / 2);
        if (!t->finite[scales[g]])
            count_bad(v, p8, (g0 + g) * NVFP4_GROUP, st);
        if (f32)
            for (int i = 0; i < NVFP4_GROUP / 2; i++) {
                f32[g * NVFP4_GROUP + 2 * i] = v[p8[i] & 15];
                f32[g * NVFP4_GROUP + 2 * i + 1] = v[p8[i] >> 4];
            }
    }
    if (bf16)
        dq_groups_bf16(t, packed, scales, groups, t->simd, bf16);
}

/* 16 source values as f32, whatever their dtype. */
static void load_group(const uint8_t *src, ff_dtype sd, uint64_t at, float *x)
{
    if (sd == FF_DT_BF16) {
        for (int i = 0; i < NVFP4_GROUP; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * (at + (uint64_t)i), 2);
            x[i] = ff_bf16_to_f32(h);
        }
        return;
    }
    for (int i = 0; i < NVFP4_GROUP; i++)
        x[i] = ff_load_f32(src, sd, at + (uint64_t)i);
}

#if defined(__x86_64__)
#define T2 __attribute__((target("avx2")))
/* Groups decoded to bf16 at a time for the vector error pass (on the stack). */
#define ERROR_CHUNK 64

static T2 inline __m256 bf16x8_f32(const void *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* Lane i of every group: e[i] += (y - x)^2 and s[i] += x^2 in double, a
 * multiply then an add each, as the scalar loop rounds them (target avx2
 * has no FMA to fuse them into), the 16 lanes four doubles to a vector. */
static T2 void error_lanes_avx2(const uint16_t *y, const uint8_t *x, uint64_t groups, double e[NVFP4_GROUP],
                                double s[NVFP4_GROUP])
{
    __m256d ev[4], sv[4];
    for (int k = 0; k < 4; k++) {
        ev[k] = _mm256_loadu_pd(e + 4 * k);
        sv[k] = _mm256_loadu_pd(s + 4 * k);
    }
    for (uint64_t g = 0; g < groups; g++)
        for (int h = 0; h < 2; h++) {
            __m256 yf = bf16x8_f32(y + g * NVFP4_GROUP + 8 * h), xf = bf16x8_f32(x + (g * NVFP4_GROUP + 8 * h) * 2);
            for (int q = 0; q < 2; q++) {
                __m256d yd = _mm256_cvtps_pd(q ? _mm256_extractf128_ps(yf, 1) : _mm256_castps256_ps128(yf));
                __m256d xd = _mm256_cvtps_pd(q ? _mm256_extractf128_ps(xf, 1) : _mm256_castps256_ps128(xf));
                __m256d d = _mm256_sub_pd(yd, xd);
                ev[2 * h + q] = _mm256_add_pd(ev[2 * h + q], _mm256_mul_pd(d, d));
                sv[2 * h + q] = _mm256_add_pd(sv[2 * h + q], _mm256_mul_pd(xd, xd));
            }
        }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_pd(e + 4 * k, ev[k]);
        _mm256_storeu_pd(s + 4 * k, sv[k]);
    }
}

#define T5 __attribute__((target("avx512f")))

static T5 inline __m512 bf16x16_f32(const void *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

static T5 inline __m512d upper8_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* error_lanes_avx2 at 512 bits: the 16 lanes eight doubles to a vector
 * (target avx512f has no FMA for the compiler to fuse with either: FMA is
 * its own feature to GCC). */
static T5 void error_lanes_512(const uint16_t *y, const uint8_t *x, uint64_t groups, double e[NVFP4_GROUP],
                               double s[NVFP4_GROUP])
{
    /* the running sums themselves: each term added to them in order */
    __m512d e0 = _mm512_loadu_pd(e), e1 = _mm512_loadu_pd(e + 8), s0 = _mm512_loadu_pd(s), s1 = _mm512_loadu_pd(s + 8);
    for (uint64_t g = 0; g < groups; g++) {
        __m512 yf = bf16x16_f32(y + g * NVFP4_GROUP), xf = bf16x16_f32(x + g * NVFP4_GROUP * 2);
        __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(xf)), x1 = upper8_pd(xf);
        __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(yf)), x0);
        __m512d d1 = _mm512_sub_pd(upper8_pd(yf), x1);
        e0 = _mm512_add_pd(e0, _mm512_mul_pd(d0, d0));
        e1 = _mm512_add_pd(e1, _mm512_mul_pd(d1, d1));
        s0 = _mm512_add_pd(s0, _mm512_mul_pd(x0, x0));
        s1 = _mm512_add_pd(s1, _mm512_mul_pd(x1, x1));
    }
    _mm512_storeu_pd(e, e0);
    _mm512_storeu_pd(e + 8, e1);
    _mm512_storeu_pd(s, s0);
    _mm512_storeu_pd(s + 8, s1);
}

/* A bf16 source's error sums: the decode by the table's byte shuffles
 * (ff_round_bf16 of each value is the bf16 they give), then the lanes in
 * vectors (simd 2: at 512 bits). Group by group in scalar code this was
 * 92% of verify --against. */
static void error_rows_simd(const dq_table *t, const uint8_t *packed, const uint8_t *scales, uint64_t groups,
                            const uint8_t *src, int simd, double e[NVFP4_GROUP], double s[NVFP4_GROUP])
{
    uint16_t y[ERROR_CHUNK * NVFP4_GROUP];
    for (uint64_t g = 0; g < groups; g += ERROR_CHUNK) {
        uint64_t k = groups - g < ERROR_CHUNK ? groups - g : ERROR_CHUNK;
        groups_bf16_avx2(t, packed + g * (NVFP4_GROUP / 2), scales + g, k, y);
        if (simd >= 2)
            error_lanes_512(y, src + g * NVFP4_GROUP * 2, k, e, s);
        else
            error_lanes_avx2(y, src + g * NVFP4_GROUP * 2, k, e, s);
    }
}

static int lanes_finite(const double v[NVFP4_GROUP])
{
    for (int i = 0; i < NVFP4_GROUP; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}
#endif

void dq_error_groups(const dq_table *t, const uint8_t *packed, const uint8_t *scales, uint64_t groups, uint64_t g0,
                     const uint8_t *src, ff_dtype sd, int simd, double *se, double *ss, dq_stats *st)
{
    double e[NVFP4_GROUP] = {0}, s[NVFP4_GROUP] = {0};
#if defined(__x86_64__)
    /* A NaN's sign and payload depend on which operand of an add the
     * compiler put first, so only finite sums are the scalar loop's bit for
     * bit: any other is summed again by it, which also counts the non-finite
     * values (a finite sum had none: one would have made its lane NaN or
     * infinite). */
    if (simd && sd == FF_DT_BF16) {
        error_rows_simd(t, packed, scales, groups, src, simd, e, s);
        if (lanes_finite(e) && lanes_finite(s)) {
            groups = 0;   /* done: only the lanes' sums are left */
        } else {
            memset(e, 0, sizeof e);
            memset(s, 0, sizeof s);
        }
    }
#endif
    (void)simd;
    for (uint64_t g = 0; g < groups; g++) {
        const float *r = t->rnd + scales[g] * 16;
        const uint8_t *p8 = packed + g * (NVFP4_GROUP / 2);
        float x[NVFP4_GROUP], y[NVFP4_GROUP];
        if (!t->finite[scales[g]])
            count_bad(t->val + scales[g] * 16, p8, (g0 + g) * NVFP4_GROUP, st);
        for (int i = 0; i < NVFP4_GROUP / 2; i++) {
            y[2 * i] = r[p8[i] & 15];
            y[2 * i + 1] = r[p8[i] >> 4];
        }
        load_group(src, sd, g * NVFP4_GROUP, x);
        for (int i = 0; i < NVFP4_GROUP; i++) {
            double d = (double)y[i] - (double)x[i];
            e[i] += d * d;
            s[i] += (double)x[i] * (double)x[i];
        }
    }
    for (int i = 0; i < NVFP4_GROUP; i++) {
        *se += e[i];
        *ss += s[i];
    }
}

void dq_error_rows(const ckpt *c, const dq_module *m, const dq_table *t, uint64_t row, uint64_t n,
                   const uint8_t *src, ff_dtype sd, double *se, double *ss, dq_stats *st)
{
    uint64_t groups = n * (m->cols / NVFP4_GROUP), g0 = row * (m->cols / NVFP4_GROUP);
    const uint8_t *packed = (const uint8_t *)ckpt_data(c, m->packed) + g0 * (NVFP4_GROUP / 2);
    const uint8_t *scales = (const uint8_t *)ckpt_data(c, m->scale) + g0;
    dq_error_groups(t, packed, scales, groups, g0, src, sd, t->simd, se, ss, st);
}

int dq_decode(const ckpt *c, const dq_module *m, float *f32, uint16_t *bf16, dq_stats *st,
              ff_err *e)
{
    memset(st, 0, sizeof *st);
    st->first_bad = UINT64_MAX;
    memcpy(&st->global_scale, ckpt_data(c, m->global), sizeof(float));
    dq_table *t = malloc(sizeof *t);
    if (!t)
        return ff_oom(e, "out of memory decoding %s", m->module);
    dq_table_init(t, st->global_scale);
    dq_decode_rows(c, m, t, 0, m->rows, f32, bf16, st);
    free(t);
    return FF_OK;
}

void dq_drop(const ckpt *c, const ckpt_tensor *t, uint64_t off, uint64_t bytes)
{
    const st_file *f = &c->files[t->file];
    if (f->map && !f->borrowed)
        st_map_drop(ckpt_data(c, t) + off, bytes);
}

void dq_drop_rows(const ckpt *c, const dq_module *m, uint64_t row, uint64_t n)
{
    dq_drop(c, m->packed, row * (m->cols / 2), n * (m->cols / 2));
    dq_drop(c, m->scale, row * (m->cols / NVFP4_GROUP), n * (m->cols / NVFP4_GROUP));
}

void dq_drop_whole(const ckpt *c, const ckpt_tensor *t)
{
    const st_file *f = &c->files[t->file];
    uint64_t at = f->data_off + t->st->begin, end = f->data_off + t->st->end + (2ull << 20);
    if (end > f->file_size)
        end = f->file_size;
    if (f->map && !f->borrowed && end > at)
        st_map_drop(f->map + at, end - at);
}

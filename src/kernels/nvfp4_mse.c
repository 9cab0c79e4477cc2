#include "nvfp4_mse.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "nvfp4.h"

int nvfp4_obs_from_name(const char *name, nvfp4_obs *o)
{
    memset(o, 0, sizeof *o);
    if (!strcmp(name, "minmax") || !strcmp(name, "memoryless_minmax")) {
        o->kind = NVFP4_OBS_MINMAX;
        o->llmc_name = "memoryless_minmax";
        return 0;
    }
    /* MemorylessMSEObserver / MovingAverageMSEObserver defaults (mse.py); the
     * moving average never applies to a weight (observed once). */
    o->maxshrink = 0.20;
    o->patience = 5;
    o->grid = 100.0;
    o->norm = 2.4;
    o->expand = 1.0;
    if (!strcmp(name, "mse") || !strcmp(name, "memoryless_mse")) {
        o->kind = NVFP4_OBS_MSE;
        o->llmc_name = "memoryless_mse";
    } else if (!strcmp(name, "expanded-mse") || !strcmp(name, "expanded_mse") ||
               !strcmp(name, "nvfp4_expanded_mse") || !strcmp(name, "fouroversix")) {
        /* NVFP4ExpandedMSEObserver: 1.8x down to 0.8x of max|x| */
        o->kind = NVFP4_OBS_EXPANDED_MSE;
        o->llmc_name = "nvfp4_expanded_mse";
        o->expand = 1.8;
        o->maxshrink = 1 - 0.8 / 1.8;
        o->grid = 200.0;
        o->patience = 1000;
    } else {
        return -1;
    }
    o->steps = (int)(o->maxshrink * o->grid);   /* python int(): truncation */
    return 0;
}

int nvfp4_obs_needs_mask(const nvfp4_obs *o)
{
    return o->patience < o->steps;
}

/* |d|^norm as torch computes Tensor.pow(python float) for a 16-bit tensor: the
 * exponent is first rounded to the tensor's dtype (2.4 -> 2.40625 in bf16),
 * the power taken in float, the result rounded back. A 16-bit |d| has at most
 * 32768 values, so a table does it exactly (checked against torch over all of
 * them). */
static float pow_bf16[0x8000], pow_f16[0x8000];
/* every observer llm-compressor registers defaults to norm 2.4; other norms
 * (none reachable from the CLI) fall back to powf */
static const double pow_norm_tab = 2.4;
static pthread_once_t pow_once = PTHREAD_ONCE_INIT;

static void pow_init(void)
{
    float e_bf = ff_round_to(FF_DT_BF16, (float)pow_norm_tab);
    float e_h = ff_round_to(FF_DT_F16, (float)pow_norm_tab);
    for (uint32_t i = 0; i < 0x8000; i++) {
        float v = ff_bf16_to_f32((uint16_t)i);
        pow_bf16[i] = ff_round_bf16((float)pow((double)v, (double)e_bf));
        float h = ff_f16_to_f32((uint16_t)i);
        pow_f16[i] = ff_round_to(FF_DT_F16, (float)pow((double)h, (double)e_h));
    }
}

static inline float pow_t(float a, ff_dtype t, float norm)
{
    if (norm != (float)pow_norm_tab)
        return ff_round_to(t, powf(a, ff_round_to(t, norm)));
    switch (t) {
    case FF_DT_BF16: return pow_bf16[ff_f32_to_bf16(a) & 0x7fff];
    case FF_DT_F16: return pow_f16[ff_f32_to_f16(a) & 0x7fff];
    default: return powf(a, norm);
    }
}

static float dtype_eps(ff_dtype t)
{
    switch (t) {
    case FF_DT_BF16: return 0x1p-7f;
    case FF_DT_F16: return 0x1p-10f;
    default: return FLT_EPSILON;
    }
}

static float dtype_max(ff_dtype t)
{
    switch (t) {
    case FF_DT_BF16: return ff_bf16_to_f32(0x7f7f);
    case FF_DT_F16: return 65504.0f;
    default: return FLT_MAX;
    }
}

float nvfp4_mse_candidate(const nvfp4_obs *o, ff_dtype t, float amax, int i)
{
    /* min_val * expand: a python float scalar reaches the bf16 kernel as f32
     * (opmath), the product is rounded to the dtype; same for * p. */
    float a = ff_round_to(t, amax * (float)o->expand);
    float p = (float)(1.0 - (double)i / o->grid);
    return ff_round_to(t, a * p);
}

float nvfp4_mse_group_error(const float *x, float c, ff_dtype t, const nvfp4_obs *o)
{
    pthread_once(&pow_once, pow_init);
    /* calculate_qparams(global_scale=None, scale_dtype=None): scale =
     * max_val_pos / (bit_range.to(dtype) / 2) = c / 6 in the dtype; a zero
     * scale becomes finfo(dtype).eps */
    float s = ff_round_to(t, c / NVFP4_FP4_MAX);
    if (s == 0.0f)
        s = dtype_eps(t);
    float norm = (float)o->norm, acc = 0.0f;
    for (int i = 0; i < NVFP4_GROUP; i++) {
        /* _quantize_dequantize: x / scale, clamp, cast_to_fp4, * scale, each
         * op rounded to the dtype; then (q - x).abs().pow(norm), summed in
         * f32 (torch's reduction accumulates 16 bf16 values in float) */
        float y = ff_round_to(t, x[i] / s);
        float q = nvfp4_code_value[nvfp4_fp4_code(y)];
        float d = ff_round_to(t, q * s);
        float diff = ff_round_to(t, d - x[i]);
        acc += pow_t(fabsf(diff), t, norm);
    }
    return ff_round_to(t, acc);
}

static void load_group(const void *w, ff_dtype t, uint64_t base, float *x)
{
    for (int i = 0; i < NVFP4_GROUP; i++)
        x[i] = ff_load_f32(w, t, base + (uint64_t)i);
}

static float group_absmax(const float *x)
{
    float m = 0.0f;
    for (int i = 0; i < NVFP4_GROUP; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

#if defined(__x86_64__)
#include <immintrin.h>
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INL __attribute__((always_inline)) inline

static T5 INL __m512 rbf16_512(__m512 s)
{
    __m512i u = _mm512_castps_si512(s);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
}

static T5 INL __m512 abs512(__m512 x)
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

/* nvfp4_fp4_code's magnitude (0..7) of |y| (see nvfp4_simd.c codes_512). */
static T5 INL __m512i fp4_mag_512(__m512 a)
{
    __m512i u = _mm512_castps_si512(a);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 22), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x1fffff)));
    __m512i m = _mm512_min_epu32(_mm512_sub_epi32(_mm512_srli_epi32(u, 22), _mm512_set1_epi32(252)),
                                 _mm512_set1_epi32(7));
    __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_LT_OQ);
    __m512i ms = _mm512_cvt_roundps_epi32(_mm512_add_ps(a, a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_mask_mov_epi32(m, small, ms);
}

/* Sixteen groups at once, one per lane (bf16 only): the elements are
 * transposed so that each group's 16 errors are summed by vertical adds in
 * the scalar order, which keeps every rounding of the scalar search. */
static T5 void search_bf16_512(const void *w, uint64_t e0, uint64_t ngroups, const nvfp4_obs *o, int use_mask,
                               uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    const __m512 grid = _mm512_setr_ps(0, .5f, 1, 1.5f, 2, 3, 4, 6, 0, 0, 0, 0, 0, 0, 0, 0);
    const float top = ff_bf16_to_f32(0x7f7f), ex = (float)o->expand;
    uint64_t acc_any = 0;
    for (uint64_t g0 = 0; g0 < ngroups; g0 += 16) {
        int lanes = ngroups - g0 < 16 ? (int)(ngroups - g0) : 16;
        float xt[16][16] __attribute__((aligned(64)));
        for (int g = 0; g < 16; g++)
            for (int k = 0; k < 16; k++)
                xt[k][g] = g < lanes ? ff_load_f32(w, FF_DT_BF16, e0 + (g0 + (uint64_t)g) * 16 + (uint64_t)k) : 0.0f;
        __m512 x[16], amax = _mm512_setzero_ps();
        for (int k = 0; k < 16; k++) {
            x[k] = _mm512_load_ps(xt[k]);
            amax = _mm512_max_ps(amax, abs512(x[k]));
        }
        __m512 A = rbf16_512(_mm512_mul_ps(amax, _mm512_set1_ps(ex)));
        __m512 best = _mm512_set1_ps(top);
        __m512i bidx = _mm512_setzero_si512();
        uint64_t m[16] = {0};
        for (int i = 0; i < o->steps; i++) {
            float p = (float)(1.0 - (double)i / o->grid);
            __m512 c = rbf16_512(_mm512_mul_ps(A, _mm512_set1_ps(p)));
            __m512 sv = rbf16_512(_mm512_div_ps(c, _mm512_set1_ps(NVFP4_FP4_MAX)));
            sv = _mm512_mask_mov_ps(sv, _mm512_cmp_ps_mask(sv, _mm512_setzero_ps(), _CMP_EQ_OQ),
                                    _mm512_set1_ps(0x1p-7f));
            __m512 acc = _mm512_setzero_ps();
            for (int k = 0; k < 16; k++) {
                __m512 y = rbf16_512(_mm512_div_ps(x[k], sv));
                __m512 q = _mm512_permutexvar_ps(fp4_mag_512(abs512(y)), grid);
                __mmask16 neg = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ);
                q = _mm512_mask_sub_ps(q, neg, _mm512_setzero_ps(), q);
                __m512 d = rbf16_512(_mm512_mul_ps(q, sv));
                __m512 diff = abs512(rbf16_512(_mm512_sub_ps(d, x[k])));
                __m512i ix = _mm512_srli_epi32(_mm512_castps_si512(diff), 16);
                acc = _mm512_add_ps(acc, _mm512_i32gather_ps(ix, pow_bf16, 4));
            }
            __m512 err = rbf16_512(acc);
            __mmask16 imp = _mm512_cmp_ps_mask(err, best, _CMP_LT_OQ);
            best = _mm512_mask_mov_ps(best, imp, err);
            bidx = _mm512_mask_mov_epi32(bidx, imp, _mm512_set1_epi32(i));
            if (use_mask && i < 64)
                for (unsigned b = imp; b; b &= b - 1)
                    m[__builtin_ctz(b)] |= 1ull << i;
        }
        int32_t bi[16];
        _mm512_storeu_si512(bi, bidx);
        for (int g = 0; g < lanes; g++) {
            if (use_mask) {
                mask[g0 + g] = m[g];
                acc_any |= m[g];
            } else {
                idx[g0 + g] = (uint8_t)bi[g];
            }
        }
    }
    if (any)
        *any |= acc_any;
}

static int simd_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
#endif

int nvfp4_mse_search_simd_available(void)
{
#if defined(__x86_64__)
    return simd_ok();
#else
    return 0;
#endif
}

void nvfp4_mse_search_rows_simd(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
#if defined(__x86_64__)
    if (t == FF_DT_BF16 && (float)o->norm == (float)pow_norm_tab && simd_ok()) {
        pthread_once(&pow_once, pow_init);
        search_bf16_512(w, row0 * cols, nrows * (cols / NVFP4_GROUP), o, nvfp4_obs_needs_mask(o), mask, idx, any);
        return;
    }
#endif
    nvfp4_mse_search_rows(w, t, cols, row0, nrows, o, mask, idx, any);
}

void nvfp4_mse_search_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                           const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    uint64_t groups = cols / NVFP4_GROUP, acc_any = 0;
    int use_mask = nvfp4_obs_needs_mask(o);
    float top = dtype_max(t);
    for (uint64_t r = 0; r < nrows; r++) {
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP];
            load_group(w, t, (row0 + r) * cols + g * NVFP4_GROUP, x);
            float amax = group_absmax(x);
            float best = top;
            uint64_t m = 0;
            int bi = 0;
            for (int i = 0; i < o->steps; i++) {
                float err = nvfp4_mse_group_error(x, nvfp4_mse_candidate(o, t, amax, i), t, o);
                if (err < best) {
                    best = err;
                    bi = i;
                    if (i < 64)
                        m |= 1ull << i;
                }
            }
            if (use_mask) {
                mask[r * groups + g] = m;
                acc_any |= m;
            } else {
                idx[r * groups + g] = (uint8_t)bi;
            }
        }
    }
    if (any)
        *any |= acc_any;
}

int nvfp4_mse_stop_step(const nvfp4_obs *o, uint64_t any)
{
    int no_improve = 0;
    for (int i = 0; i < o->steps; i++) {
        if (i < 64 && (any >> i & 1)) {
            no_improve = 0;
        } else if (++no_improve >= o->patience) {
            return i;
        }
    }
    return o->steps - 1;
}

float nvfp4_mse_choose_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                            const nvfp4_obs *o, const uint64_t *mask, const uint8_t *idx, int stop,
                            float *gamax)
{
    uint64_t groups = cols / NVFP4_GROUP;
    uint64_t lim = stop >= 63 ? ~0ull : (2ull << stop) - 1;
    float top = 0.0f;
    for (uint64_t r = 0; r < nrows; r++)
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP];
            load_group(w, t, (row0 + r) * cols + g * NVFP4_GROUP, x);
            int i = 0;
            if (mask) {
                uint64_t m = mask[r * groups + g] & lim;
                i = m ? 63 - __builtin_clzll(m) : 0;   /* the last improvement */
            } else {
                i = idx[r * groups + g];
            }
            float c = nvfp4_mse_candidate(o, t, group_absmax(x), i);
            gamax[r * groups + g] = c;
            top = c > top ? c : top;
        }
    return top;
}

void nvfp4_quantize_rows_ranges(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                float gs, const float *gamax, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t r = 0; r < nrows; r++) {
        uint64_t base = (row0 + r) * cols;
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP];
            load_group(w, t, base + g * NVFP4_GROUP, x);
            float s8f;
            scales[r * groups + g] = nvfp4_group_scale(gamax[r * groups + g], gs, t, &s8f);
            float eff = s8f / gs;
            uint8_t *out = packed + r * (cols / 2) + g * (NVFP4_GROUP / 2);
            for (int i = 0; i < NVFP4_GROUP; i += 2) {
                uint8_t lo = nvfp4_fp4_code(x[i] / eff);
                uint8_t hi = nvfp4_fp4_code(x[i + 1] / eff);
                out[i / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

/* The merge's two loops in AVX-512 and AVX2. Each lane does what the scalar
 * loop does to one element, in the same order (fmaf is one rounding, as
 * vfmadd is; the bf16 rounding is the same bit arithmetic), so every kernel
 * gives the scalar bytes (tests/unit/test_lora.c compares them). */
#include "lora_simd.h"

#include <math.h>
#include <string.h>

#include "dtype.h"

void lora_delta_scalar(const float *u, const float *V, int64_t r, uint64_t n, float *acc)
{
    memset(acc, 0, n * sizeof *acc);
    for (int64_t k = 0; k < r; k++) {
        const float *v = V + (uint64_t)k * n;
        float uk = u[k];
        for (uint64_t j = 0; j < n; j++)
            acc[j] = fmaf(uk, v[j], acc[j]);
    }
}

/* One element: its merged bf16 bits; *changed and *max_abs updated. */
static inline uint16_t apply_one(uint16_t base, float acc, float scale, uint64_t *changed, float *max_abs)
{
    float d = acc * scale, b = ff_bf16_to_f32(base);
    uint16_t o = ff_f32_to_bf16(b + d);
    *changed += ff_bf16_to_f32(o) != b;
    *max_abs = fabsf(d) > *max_abs ? fabsf(d) : *max_abs;
    return o;
}

uint64_t lora_apply_bf16_scalar(const uint16_t *base, const float *acc, float scale, uint64_t n, uint16_t *out,
                                float *max_abs)
{
    uint64_t changed = 0;
    for (uint64_t j = 0; j < n; j++)
        out[j] = apply_one(base[j], acc[j], scale, &changed, max_abs);
    return changed;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "nvfp4_simd.h"

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define T2 __attribute__((target("avx2,fma")))

/* 4 vectors of acc kept in registers across the r rows of V. */
static T5 void delta_512(const float *u, const float *V, int64_t r, uint64_t n, float *acc)
{
    uint64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < r; k++) {
            const float *v = V + (uint64_t)k * n + j;
            __m512 uk = _mm512_set1_ps(u[k]);
            a0 = _mm512_fmadd_ps(uk, _mm512_loadu_ps(v), a0);
            a1 = _mm512_fmadd_ps(uk, _mm512_loadu_ps(v + 16), a1);
            a2 = _mm512_fmadd_ps(uk, _mm512_loadu_ps(v + 32), a2);
            a3 = _mm512_fmadd_ps(uk, _mm512_loadu_ps(v + 48), a3);
        }
        _mm512_storeu_ps(acc + j, a0);
        _mm512_storeu_ps(acc + j + 16, a1);
        _mm512_storeu_ps(acc + j + 32, a2);
        _mm512_storeu_ps(acc + j + 48, a3);
    }
    for (; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
        __m512 a = _mm512_setzero_ps();
        for (int64_t k = 0; k < r; k++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(u[k]), _mm512_maskz_loadu_ps(m, V + (uint64_t)k * n + j), a);
        _mm512_mask_storeu_ps(acc + j, m, a);
    }
}

/* ff_f32_to_bf16 on 16 lanes. */
static T5 __m256i bf16_512(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

static T5 uint64_t apply_512(const uint16_t *base, const float *acc, float scale, uint64_t n, uint16_t *out,
                             float *max_abs)
{
    uint64_t changed = 0;
    __m512 s = _mm512_set1_ps(scale), mx = _mm512_set1_ps(*max_abs);
    for (uint64_t j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
        __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, base + j)), 16));
        __m512 d = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + j), s);
        __m256i o = bf16_512(_mm512_add_ps(b, d));
        _mm256_mask_storeu_epi16(out + j, m, o);
        __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
        changed += (uint64_t)__builtin_popcount(_mm512_mask_cmp_ps_mask(m, back, b, _CMP_NEQ_UQ));
        /* max_ps returns its second operand when either is NaN: a NaN delta is skipped, as in apply_one */
        mx = _mm512_mask_max_ps(mx, m, _mm512_abs_ps(d), mx);
    }
    *max_abs = _mm512_reduce_max_ps(mx);
    return changed;
}

static T2 void delta_256(const float *u, const float *V, int64_t r, uint64_t n, float *acc)
{
    uint64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < r; k++) {
            const float *v = V + (uint64_t)k * n + j;
            __m256 uk = _mm256_set1_ps(u[k]);
            a0 = _mm256_fmadd_ps(uk, _mm256_loadu_ps(v), a0);
            a1 = _mm256_fmadd_ps(uk, _mm256_loadu_ps(v + 8), a1);
            a2 = _mm256_fmadd_ps(uk, _mm256_loadu_ps(v + 16), a2);
            a3 = _mm256_fmadd_ps(uk, _mm256_loadu_ps(v + 24), a3);
        }
        _mm256_storeu_ps(acc + j, a0);
        _mm256_storeu_ps(acc + j + 8, a1);
        _mm256_storeu_ps(acc + j + 16, a2);
        _mm256_storeu_ps(acc + j + 24, a3);
    }
    for (; j < n; j++) {
        float a = 0.0f;
        for (int64_t k = 0; k < r; k++)
            a = fmaf(u[k], V[(uint64_t)k * n + j], a);
        acc[j] = a;
    }
}

static T2 uint64_t apply_256(const uint16_t *base, const float *acc, float scale, uint64_t n, uint16_t *out,
                             float *max_abs)
{
    uint64_t changed = 0, j = 0;
    __m256 s = _mm256_set1_ps(scale), mx = _mm256_set1_ps(*max_abs);
    __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (; j + 8 <= n; j += 8) {
        __m256i bi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(base + j))), 16);
        __m256 b = _mm256_castsi256_ps(bi), d = _mm256_mul_ps(_mm256_loadu_ps(acc + j), s);
        __m256i u = _mm256_castps_si256(_mm256_add_ps(b, d));
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
        __m128i o = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(out + j), o);
        __m256 back = _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
        changed += (uint64_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(back, b, _CMP_NEQ_UQ)));
        mx = _mm256_max_ps(_mm256_and_ps(d, absmask), mx);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, mx);
    for (int i = 0; i < 8; i++)
        *max_abs = lanes[i] > *max_abs ? lanes[i] : *max_abs;
    for (; j < n; j++)
        out[j] = apply_one(base[j], acc[j], scale, &changed, max_abs);
    return changed;
}
#endif

static const lora_kernels k_scalar = {"scalar", lora_delta_scalar, lora_apply_bf16_scalar};
#if defined(__x86_64__)
static const lora_kernels k_avx2 = {"avx2", delta_256, apply_256};
static const lora_kernels k_avx512 = {"avx512", delta_512, apply_512};
#endif

const lora_kernels *lora_kernels_by_name(const char *name)
{
    if (strcmp(name, "scalar") == 0)
        return &k_scalar;
#if defined(__x86_64__)
    if (strcmp(name, "avx2") == 0 && nvfp4_cpu_avx2_ok())
        return &k_avx2;
    if (strcmp(name, "avx512") == 0 && nvfp4_cpu_avx512_ok())
        return &k_avx512;
#endif
    return NULL;
}

const lora_kernels *lora_kernels_best(void)
{
    const lora_kernels *k = lora_kernels_by_name("avx512");
    if (!k)
        k = lora_kernels_by_name("avx2");
    return k ? k : &k_scalar;
}

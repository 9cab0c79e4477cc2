/* The E2M1 coders and the E4M3 scale coder (AVX2, AVX-512) shared by the
 * min/max kernel (nvfp4_simd.c) and the MSE observers' ranges quantizer
 * (nvfp4_mse_simd.c): one copy of the rounding both must give bit for bit.
 * Inline, for callers compiled with at least these functions' targets. */
#ifndef FF_NVFP4_CODES_SIMD_H
#define FF_NVFP4_CODES_SIMD_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "nvfp4.h"

/* e4m3 code of 0.125 (exponent -3 + bias 7 = 4, mantissa 0), CT's stand-in
 * for a zero scale */
#define E4M3_ZERO_SCALE_CODE 0x20

#define CODES_T2 __attribute__((target("avx2,fma"))) __attribute__((always_inline)) inline
#define CODES_T5 __attribute__((target("avx512f,avx512bw,avx512vl"))) __attribute__((always_inline)) inline

static CODES_T2 __m256 abs256(__m256 x)
{
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
}

/* Round to bf16 and back, RNE on the bits (ff_round_bf16 for non-NaN). */
static CODES_T2 __m256 bf16_round_256(__m256 s)
{
    __m256i u = _mm256_castps_si256(s);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Eight groups' scales from their rounded amax / 6 (the caller rounds as
 * its dtype or observer does): e4m3 codes and the f32 value eff = s8/gs. */
static CODES_T2 __m256i scales_from_256(__m256 s6, __m256 gsv, __m256 *eff)
{
    __m256 s = _mm256_mul_ps(s6, gsv);
    s = _mm256_min_ps(s, _mm256_set1_ps(NVFP4_FP8_MAX));
    __m256 sub = _mm256_cmp_ps(s, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
    __m256 rs = _mm256_round_ps(_mm256_mul_ps(s, _mm256_set1_ps(0x1p9f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i u = _mm256_castps_si256(s);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7ffff)));
    u = _mm256_and_si256(u, _mm256_set1_epi32((int)0xfff00000u));
    __m256i code = _mm256_sub_epi32(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(960));
    __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(u), _mm256_mul_ps(rs, _mm256_set1_ps(0x1p-9f)), sub);
    code = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(code),
                                                 _mm256_castsi256_ps(_mm256_cvtps_epi32(rs)), sub));
    __m256 zero = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_EQ_OQ);
    v = _mm256_blendv_ps(v, _mm256_set1_ps(NVFP4_ZERO_SCALE), zero);
    code = _mm256_castps_si256(_mm256_blendv_ps(
        _mm256_castsi256_ps(code), _mm256_castsi256_ps(_mm256_set1_epi32(E4M3_ZERO_SCALE_CODE)), zero));
    *eff = _mm256_div_ps(v, gsv);
    return code;
}

/* Eight codes as i32: RNE onto the E2M1 grid exactly as codes_512 does
 * (|y| < 1: rint(2|y|); else one mantissa bit rounded on the f32 bits,
 * (bits >> 22) - 252 capped at 7, which also sends Inf/NaN to 7). The
 * conversion rounds by MXCSR, which this program never changes from RNE. */
static CODES_T2 __m256i codes8_256(__m256 x, __m256 eff)
{
    __m256 y = _mm256_div_ps(x, eff), a = abs256(y);
    __m256i u = _mm256_castps_si256(a);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 22), _mm256_set1_epi32(1));
    /* (u + lsb + 0x1fffff) >> 22 - 252 with the constants folded: below 0.5
     * the subtraction wraps, the shift leaves a large value, min gives 7 and
     * the small-|y| path replaces it, exactly as before the fold */
    u = _mm256_add_epi32(_mm256_add_epi32(u, lsb), _mm256_set1_epi32(0x1fffff - (252 << 22)));
    __m256i m = _mm256_min_epu32(_mm256_srli_epi32(u, 22), _mm256_set1_epi32(7));
    __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LT_OQ);
    __m256i ms = _mm256_cvtps_epi32(_mm256_add_ps(a, a));
    m = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(m), _mm256_castsi256_ps(ms), small));
    __m256 neg = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_or_si256(m, _mm256_and_si256(_mm256_castps_si256(neg), _mm256_set1_epi32(8)));
}

/* A bf16 tensor's eight group scales from their max |x|: R(amax / 6), then
 * as scales_from_256. The bf16 kernels and the ranges quantizer all take
 * this one call, so their scales agree bit for bit. */
static CODES_T2 __m256i scales_bf16_256(__m256 amax, __m256 gsv, __m256 *eff)
{
    return scales_from_256(bf16_round_256(_mm256_div_ps(amax, _mm256_set1_ps(NVFP4_FP4_MAX))), gsv, eff);
}

/* The low byte of each of eight i32 scale codes, in order, to sc[0..7]. */
static CODES_T2 void store_scale_bytes8(__m256i codes, uint8_t *sc)
{
    const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                           0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i b = _mm256_shuffle_epi8(codes, bytes);
    _mm_storel_epi64((__m128i *)sc, _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
}

static CODES_T2 void codes_256(__m256 x0, __m256 x1, __m256 eff, uint8_t *out)
{
    __m256i c0 = codes8_256(x0, eff), c1 = codes8_256(x1, eff);
    /* to 16 x i16 in element order, then (even | odd << 4) per 32-bit lane */
    __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8);
    p = _mm256_or_si256(p, _mm256_srli_epi32(p, 12));
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    p = _mm256_shuffle_epi8(p, pick);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64((__m128i *)out, _mm256_castsi256_si128(p));
}

static CODES_T5 __m512 abs512(__m512 x)
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

/* Round to bf16 and back, RNE on the bits (ff_round_bf16 for non-NaN). */
static CODES_T5 __m512 bf16_round_512(__m512 s)
{
    __m512i u = _mm512_castps_si512(s);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
}

/* Sixteen groups' scales from their rounded amax / 6 (the caller rounds as
 * its dtype or observer does): e4m3 codes and the f32 value eff = s8/gs. */
static CODES_T5 __m512i scales_from_512(__m512 s6, __m512 gsv, __m512 *eff)
{
    __m512 s = _mm512_mul_ps(s6, gsv);
    s = _mm512_min_ps(s, _mm512_set1_ps(NVFP4_FP8_MAX));
    __mmask16 sub = _mm512_cmp_ps_mask(s, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
    __m512 rs = _mm512_roundscale_ps(_mm512_mul_ps(s, _mm512_set1_ps(0x1p9f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_castps_si512(s);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7ffff)));
    u = _mm512_and_si512(u, _mm512_set1_epi32((int)0xfff00000u));
    /* normal: e4m3 = (f32 bits >> 20) - ((127 - 7) << 3) */
    __m512i code = _mm512_sub_epi32(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(960));
    __m512 v = _mm512_castsi512_ps(u);
    code = _mm512_mask_mov_epi32(code, sub, _mm512_cvtps_epi32(rs));
    v = _mm512_mask_mov_ps(v, sub, _mm512_mul_ps(rs, _mm512_set1_ps(0x1p-9f)));
    __mmask16 zero = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_EQ_OQ);
    code = _mm512_mask_mov_epi32(code, zero, _mm512_set1_epi32(E4M3_ZERO_SCALE_CODE));
    v = _mm512_mask_mov_ps(v, zero, _mm512_set1_ps(NVFP4_ZERO_SCALE));
    *eff = _mm512_div_ps(v, gsv);
    return code;
}

/* scales_bf16_256 for sixteen groups. */
static CODES_T5 __m512i scales_bf16_512(__m512 amax, __m512 gsv, __m512 *eff)
{
    return scales_from_512(bf16_round_512(_mm512_div_ps(amax, _mm512_set1_ps(NVFP4_FP4_MAX))), gsv, eff);
}

/* One group of 16: codes, pairs packed low nibble first, 8 bytes out.
 * CT's buckets are exactly round-to-nearest-even onto the E2M1 grid
 * {0, .5, 1, 1.5, 2, 3, 4, 6} (every edge tie goes to the even code), so:
 * |y| < 1: code = rint(2|y|) (0, 1, 2); else RNE to one mantissa bit on the
 * f32 bits, code = (bits >> 22) - 252, capped at 7 (also Inf/NaN -> 7). */
static CODES_T5 void codes_512(__m512 x, __m512 eff, uint8_t *out)
{
    __m512 y = _mm512_div_ps(x, eff), a = abs512(y);
    __m512i u = _mm512_castps_si512(a);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 22), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x1fffff)));
    __m512i m = _mm512_min_epu32(_mm512_sub_epi32(_mm512_srli_epi32(u, 22), _mm512_set1_epi32(252)),
                                 _mm512_set1_epi32(7));
    __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_LT_OQ);
    __m512i ms = _mm512_cvt_roundps_epi32(_mm512_add_ps(a, a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    m = _mm512_mask_mov_epi32(m, small, ms);
    __mmask16 neg = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ);
    m = _mm512_mask_or_epi32(m, neg, m, _mm512_set1_epi32(8));
    /* each 64-bit lane holds (even, odd): even | odd << 4 in its low byte */
    __m512i p = _mm512_or_si512(m, _mm512_srli_epi64(m, 28));
    _mm_storel_epi64((__m128i *)out, _mm512_cvtepi64_epi8(p));
}
#endif
#endif

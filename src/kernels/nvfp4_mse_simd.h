/* The MSE observers' vector kernels (bf16 only; nvfp4_mse.c picks them).
 * Each repeats the scalar search's arithmetic exactly (nvfp4_mse.h, and
 * docs/observers.md "The exact arithmetic"), so every kernel chooses the
 * same steps:
 *
 *   code   nvfp4_fp4_code(R(x / s)) is read off seven exact thresholds of
 *          |x| per candidate scale s instead of divided out (below);
 *   d      R(q * s) per code, once per candidate;
 *   error  pow_bf16[bf16 bits of R(|x| - d)] (|R(d - x)|, as R is odd),
 *          summed in f32 in element order 0..15 by vertical adds, one
 *          group per lane, then rounded: the scalar loop's every rounding.
 *
 * The thresholds: x / s is a quotient of two 8-bit significands, so it is
 * either exactly a bf16 midpoint or at least 2^-17 (relative) from it,
 * while R_f32 moves it by at most 2^-24; so R_bf16(R_f32(x / s)) reaches a
 * bucket edge b exactly when x / s passes the bf16 midpoint next to b, m_j:
 * 0.25 + 2^-10, 0.75 - 2^-9, 1.25 + 2^-8, 1.75 - 2^-8, 2.5 + 2^-7,
 * 3.5 - 2^-7, 5 + 2^-6. CT's buckets are closed at the even codes, so
 * code >= j when |x| >= m_j * s for even j and |x| > m_j * s for odd j (the
 * ties go to the even neighbours); x / s never equals an m_j, whose odd
 * numerators (257, 383, 321, 447 over a power of 2) need 9 bits, so either
 * compare would do. m_j * s (9 by 8 significant bits) is exact in f32,
 * subnormal s included, and never a bf16 itself: so |x| passes it exactly
 * when |x|'s bf16 bits reach those of the next bf16 above it, the 16-bit
 * compare the AVX-512 kernel makes. */
#ifndef FF_NVFP4_MSE_SIMD_H
#define FF_NVFP4_MSE_SIMD_H

#include <stdint.h>

/* idx is a byte, so no kernel searches more steps than this. */
#define NVFP4_MSE_MAX_STEPS 256

/* What every kernel needs of one search, prepared once per call. */
typedef struct {
    const float *pow;                    /* pow_bf16: |d| bits -> R(|d|^2.40625) */
    /* The same power as arithmetic, for |d| in [2^-52, 2^52): with E its
     * biased exponent (75..178) and m its 7 mantissa bits, R(|d|^2.40625) =
     * 2^floor(77 (E - 127) / 32) * R_bf16(pow_frac[E mod 32] * pow_mant[m]),
     * pow_frac[j] = 2^frac(77 (j - 127) / 32) and pow_mant[m] =
     * (1 + m/128)^2.40625 in f32 (2.40625 = 77/32). Each of those 13,312
     * inputs gives pow_bf16's bits: test_observers checks all 32,768. */
    const float *pow_frac, *pow_mant;
    float p[NVFP4_MSE_MAX_STEPS];        /* (float)(1 - i / grid) */
    float expand;
    int steps;
    int use_mask;
} nvfp4_mse_plan;

/* ngroups consecutive bf16 groups of 16 at w. With errs (tests) each group's
 * rounded error of every step goes to errs[g * steps + i]; otherwise mask or
 * idx as nvfp4_mse_search_rows fills them, and *any |= the masks' OR. */
typedef void (*nvfp4_mse_groups_fn)(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl,
                                    uint64_t *mask, uint8_t *idx, uint64_t *any, float *errs);

#if defined(__x86_64__)
void nvfp4_mse_groups_avx2(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                           uint8_t *idx, uint64_t *any, float *errs);
/* Tests: how many of the 32,768 bf16 bits the AVX-512 kernel's power gets
 * other than pow_bf16 (0 when the identity above and its fallback hold). */
int nvfp4_mse_pow_mismatches_avx512(const nvfp4_mse_plan *pl);
/* The power gathered from pow_bf16 (avx512) or computed (avx512_arith):
 * the same bytes; which is faster depends on the CPU (nvfp4_mse.c picks). */
void nvfp4_mse_groups_avx512(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                             uint8_t *idx, uint64_t *any, float *errs);
void nvfp4_mse_groups_avx512_arith(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                                   uint8_t *idx, uint64_t *any, float *errs);

/* nvfp4_quantize_rows_ranges for bf16 rows: the min/max kernels' scale and
 * code arithmetic (nvfp4_simd.c scales_*, codes_*) with gamax in place of
 * each group's max|x|. */
void nvfp4_ranges_rows_avx2(const uint16_t *w, uint64_t cols, uint64_t row0, uint64_t nrows, float gs,
                            const float *gamax, uint8_t *packed, uint8_t *scales);
void nvfp4_ranges_rows_avx512(const uint16_t *w, uint64_t cols, uint64_t row0, uint64_t nrows, float gs,
                              const float *gamax, uint8_t *packed, uint8_t *scales);
#endif

#endif

/* AVX2 and AVX-512 kernels of the MSE observers (nvfp4_mse_simd.h says why
 * their bytes are the scalar search's). One group per lane, so each group's
 * sixteen errors are summed by vertical adds in the scalar order; the grid
 * steps run one after another over 8 (AVX2) or 16 (AVX-512) groups.
 *
 * Why not fewer steps: the search scales R(c / 6) are bf16 values, not E4M3
 * ones, and the 20 (mse) or 111 (expanded-mse) candidates give 20 and
 * 95-109 distinct scales for every bf16 max|x| mantissa, so there is no
 * repeated step to skip. What the thresholds save is the division and the
 * E2M1 rounding of every element at every step. The AVX-512 search has two
 * forms with the same bytes: avx512-arith computes the power instead of
 * gathering it (on AMD a 16-lane gather cost as much as the rest of an
 * element's error) and compares two elements' bf16 bits in one 16-bit
 * compare; avx512-gather is 40efd01's kernel, one element a compare and the
 * power gathered, which the lent hosts' Intel Xeons ran faster. */
#include "nvfp4_mse_simd.h"

#include <string.h>

#include "dtype.h"
#include "nvfp4.h"
#include "nvfp4_codes_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma")))
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INL __attribute__((always_inline)) inline

/* m_j of nvfp4_mse_simd.h (slot 0 unused) and the E2M1 magnitudes */
static const float mse_mid[8] = {0.0f,           0.25f + 0x1p-10f, 0.75f - 0x1p-9f, 1.25f + 0x1p-8f,
                                 1.75f - 0x1p-8f, 2.5f + 0x1p-7f,   3.5f - 0x1p-7f,  5.0f + 0x1p-6f};
static const float mse_q[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
/* finfo(bfloat16).eps: what a zero local scale becomes (calculate_qparams) */
#define BF16_EPS 0x1p-7f

/* ---------------------------------------------------------------- AVX-512 */

/* R_bf16 of a positive f32 below 2^111 by Veltkamp's split (hi = t - (t - v)
 * with t = v (2^16 + 1)): the top 8 significant bits rounded to nearest,
 * ties to even, 3 ops instead of 5 (test_veltkamp_every_value: every f32
 * from 2^-126 to 2^111), and 0 gives 0. It needs the three roundings as
 * written: the Makefile's -ffp-contract=off keeps any compiler from fusing
 * them into an FMA, and test_observers' every-value checks would fail if one
 * did. */
static T5 INL __m512 rbf16_small_512(__m512 v)
{
    __m512 t = _mm512_mul_ps(v, _mm512_set1_ps(65537.0f));
    return _mm512_sub_ps(t, _mm512_sub_ps(t, v));
}

/* r[k] lane g = r[g] lane k: unpack 32 and 64 transpose 4x4 blocks inside
 * each 128-bit lane, two 128-bit shuffles move the blocks */
static T5 INL void transpose16_512(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44), v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
    }
}

/* pr[k] lane g = |elements 2k and 2k+1 of group g| as bf16 bits (low and
 * high half), ax[k] lane g = |element k of group g| as f32; groups from ng
 * on read 0 */
static T5 INL void load_groups_512(const uint16_t *p, unsigned ng, __m512i pr[8], __m512 ax[16])
{
    __m512i r[16];
    for (unsigned g = 0; g < 16; g++)
        r[g] = g < ng ? _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 16 * g)))
                      : _mm512_setzero_si512();
    transpose16_512(r);
    for (int k = 0; k < 8; k++) {
        pr[k] = _mm512_and_si512(r[k], _mm512_set1_epi32(0x7fff7fff));
        ax[2 * k] = _mm512_castsi512_ps(_mm512_slli_epi32(pr[k], 16));
        ax[2 * k + 1] = _mm512_castsi512_ps(_mm512_and_si512(pr[k], _mm512_set1_epi32((int)0xffff0000u)));
    }
}

/* The power tables in registers or as memory operands: a 16-lane gather
 * from pow_bf16 costs about as much as the rest of an element's error. */
typedef struct {
    const float *pow;
    __m512 frac0, frac1, mant[8];
} pow_regs_512;

static T5 INL void pow_regs_load_512(const nvfp4_mse_plan *pl, pow_regs_512 *pr)
{
    pr->pow = pl->pow;
    pr->frac0 = _mm512_loadu_ps(pl->pow_frac);
    pr->frac1 = _mm512_loadu_ps(pl->pow_frac + 16);
    for (int k = 0; k < 8; k++)
        pr->mant[k] = _mm512_loadu_ps(pl->pow_mant + 16 * k);
}

/* pow_bf16[u] for bf16 bits u < 0x8000 (nvfp4_mse_plan gives the identity):
 * r is u as f32. Permutes pick the fraction and mantissa factors (a permute reads the low
 * five bits of its index), scalef applies 2^floor(2.40625 k); a zero has
 * k = -inf and comes out 0. Unless `checked`, every u must be 0 or in the
 * identity's range (block_in_range). Checked, the other lanes (|d| below
 * 2^-52 or from 2^52) read the table: rare, so a branch rather than a
 * gather every time. */
static T5 INL __m512 pow_bf16_512(__m512i u, __m512 r, const pow_regs_512 *pr, int checked)
{
    __mmask16 b5 = _mm512_test_epi32_mask(u, _mm512_set1_epi32(32));
    __mmask16 b6 = _mm512_test_epi32_mask(u, _mm512_set1_epi32(64));
    __m512 m0 = _mm512_permutex2var_ps(pr->mant[0], u, pr->mant[1]);
    __m512 m1 = _mm512_permutex2var_ps(pr->mant[2], u, pr->mant[3]);
    __m512 m2 = _mm512_permutex2var_ps(pr->mant[4], u, pr->mant[5]);
    __m512 m3 = _mm512_permutex2var_ps(pr->mant[6], u, pr->mant[7]);
    __m512 m = _mm512_mask_mov_ps(_mm512_mask_mov_ps(m0, b5, m1), b6, _mm512_mask_mov_ps(m2, b5, m3));
    __m512 f = _mm512_permutex2var_ps(pr->frac0, _mm512_srli_epi32(u, 7), pr->frac1);
    __m512 k = _mm512_getexp_ps(r);
    __m512 e = _mm512_scalef_ps(rbf16_small_512(_mm512_mul_ps(f, m)), _mm512_mul_ps(k, _mm512_set1_ps(2.40625f)));
    if (!checked)
        return e;
    __mmask16 in = _mm512_cmp_epu32_mask(_mm512_sub_epi32(u, _mm512_set1_epi32(75 << 7)),
                                         _mm512_set1_epi32((178 - 75 + 1) << 7), _MM_CMPINT_LT);
    __mmask16 rare = _mm512_mask_test_epi32_mask((__mmask16)~in, u, u);
    if (rare)
        e = _mm512_mask_i32gather_ps(e, rare, u, pr->pow, 4);
    return e;
}

/* unchecked, only zero and the identity's range are asked */
T5 int nvfp4_mse_pow_mismatches_avx512(const nvfp4_mse_plan *pl)
{
    pow_regs_512 pr;
    pow_regs_load_512(pl, &pr);
    int bad = 0;
    for (uint32_t u0 = 0; u0 < 0x8000; u0 += 16) {
        float got[2][16];
        __m512i u = _mm512_add_epi32(_mm512_set1_epi32((int)u0),
                                     _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        __m512 r = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
        _mm512_storeu_ps(got[0], pow_bf16_512(u, r, &pr, 1));
        _mm512_storeu_ps(got[1], pow_bf16_512(u, r, &pr, 0));
        for (uint32_t k = 0; k < 16; k++) {
            uint32_t v = u0 + k;
            int asked = v == 0 || (v >= 75u << 7 && v < 179u << 7);
            bad += memcmp(&got[0][k], &pl->pow[v], sizeof(float)) != 0;
            bad += asked && memcmp(&got[1][k], &pl->pow[v], sizeof(float)) != 0;
        }
    }
    return bad;
}

/* R(|x| - d) as its bf16 bits (what pow_bf16 is indexed by) and as f32.
 * Checked, any difference; otherwise one below 2^111 (block_in_range). */
static T5 INL __m512i diff_bits_512(__m512 a, __m512 d, int checked, __m512 *r)
{
    __m512i u = _mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(a, d)), _mm512_set1_epi32(0x7fffffff));
    if (!checked) {
        *r = rbf16_small_512(_mm512_castsi512_ps(u));
        return _mm512_srli_epi32(_mm512_castps_si512(*r), 16);
    }
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    *r = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    return u;
}

/* Two elements' d = D[code] at one step, in the pair's 16-bit halves: |x|
 * passes threshold j exactly when its bf16 bits reach tt[j], the bits of the
 * bf16 above m_j * s (never itself a bf16: nvfp4_mse_simd.h), so one 16-bit
 * compare serves two elements. The masks are nested; the last passed wins. */
static T5 INL __m512i pair_d_512(__m512i x2, const __m512i *tt, const __m512i *dd)
{
    __m512i q = dd[0];
#pragma GCC unroll 8
    for (int j = 1; j < 8; j++)
        q = _mm512_mask_mov_epi16(q, _mm512_cmp_epu16_mask(x2, tt[j], _MM_CMPINT_NLT), dd[j]);
    return q;
}

/* a step's bf16 threshold bits and D values, each in both 16-bit halves */
static T5 INL void step_tables_512(__m512 s, __m512i *tt, __m512i *dd)
{
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m512i t = _mm512_castps_si512(_mm512_mul_ps(s, _mm512_set1_ps(mse_mid[j])));
        __m512i tb = _mm512_add_epi32(_mm512_srli_epi32(t, 16), _mm512_set1_epi32(1));
        tt[j] = _mm512_or_si512(tb, _mm512_slli_epi32(tb, 16));
        /* R(0 * inf) is NaN too */
        __m512i db = _mm512_castps_si512(bf16_round_512(_mm512_mul_ps(s, _mm512_set1_ps(mse_q[j]))));
        dd[j] = _mm512_or_si512(db, _mm512_srli_epi32(db, 16));
    }
}

/* Whether every nonzero R(|x| - d) of these groups lies in [2^-52, 2^52),
 * the power's identity, at every step. A group's candidates are at least
 * 0.4 amax (expand * p >= 0.81 in both registered grids, 1 x 0.81 and
 * 1.8 x 0.45; any other grid is checked), so its scales are at least
 * amax / 15 and a nonzero d at least amax / 30. With lo the least nonzero
 * |x| of the block and hi the largest: a nonzero |x| - d is |x|, or d, or
 * a multiple of the smaller one's ulp, so at least lo * 2^-13 after
 * rounding; and it is at most 2 hi (d <= 1.8 amax, rounded). So lo >= 2^-38
 * and hi < 2^48 keep it inside, with room to spare. */
static T5 INL int block_in_range(const __m512 ax[16], __m512 amax, const nvfp4_mse_plan *pl)
{
    if (!(pl->expand * pl->p[pl->steps - 1] >= 0.4f && pl->expand <= 2.0f))
        return 0;
    __m512 lo = _mm512_set1_ps(__builtin_inff());
    for (int k = 0; k < 16; k++)
        lo = _mm512_mask_min_ps(lo, _mm512_cmp_ps_mask(ax[k], _mm512_setzero_ps(), _CMP_NEQ_OQ), lo, ax[k]);
    return _mm512_reduce_min_ps(lo) >= 0x1p-38f && _mm512_reduce_max_ps(amax) < 0x1p48f;
}

/* step p's local scale R(R(A * p) / 6), a zero one made bf16's eps */
static T5 INL __m512 step_scale_512(__m512 A, float p)
{
    __m512 c = bf16_round_512(_mm512_mul_ps(A, _mm512_set1_ps(p)));
    __m512 s = bf16_round_512(_mm512_div_ps(c, _mm512_set1_ps(NVFP4_FP4_MAX)));
    return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_EQ_OQ), _mm512_set1_ps(BF16_EPS));
}

/* every step's rounded error of 16 groups: ev[i] lane g (the power computed) */
static T5 INL void block_steps_512(const __m512i x2[8], const __m512 ax[16], __m512 A, const nvfp4_mse_plan *pl,
                                   const pow_regs_512 *pr, int checked, __m512 *ev)
{
    __m512i tt[8], dd[8];
    for (int i = 0; i < pl->steps; i++) {
        __m512 s = step_scale_512(A, pl->p[i]);
        step_tables_512(s, tt, dd);
        __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i q = pair_d_512(x2[k], tt, dd);
            __m512 d0 = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
            __m512 d1 = _mm512_castsi512_ps(_mm512_and_si512(q, _mm512_set1_epi32((int)0xffff0000u)));
            __m512 r0, r1;
            __m512i u0 = diff_bits_512(ax[2 * k], d0, checked, &r0);
            __m512i u1 = diff_bits_512(ax[2 * k + 1], d1, checked, &r1);
            acc = _mm512_add_ps(acc, pow_bf16_512(u0, r0, pr, checked));
            acc = _mm512_add_ps(acc, pow_bf16_512(u1, r1, pr, checked));
        }
        ev[i] = bf16_round_512(acc);
    }
}

/* one element's error at one step, 40efd01's way: d = D[code] by f32
 * compares (nested masks, the last passed threshold wins), |R(|x| - d)|
 * rounded on the bits, its power gathered from the table */
static T5 INL __m512 elem_error_gather_512(__m512 a, const __m512 *t, const __m512 *d, const float *pow)
{
    __m512 q = d[0];
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[1], _CMP_GT_OQ), d[1]);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[2], _CMP_GE_OQ), d[2]);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[3], _CMP_GT_OQ), d[3]);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[4], _CMP_GE_OQ), d[4]);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[5], _CMP_GT_OQ), d[5]);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[6], _CMP_GE_OQ), d[6]);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, t[7], _CMP_GT_OQ), d[7]);
    __m512 r;
    return _mm512_i32gather_ps(diff_bits_512(a, q, 1, &r), pow, 4);
}

/* block_steps_512 with the power gathered and one element a compare: on
 * the lent hosts' Intel Xeons this was faster than the pair compares and
 * Veltkamp roundings with the same gather (docs/observers.md) */
static T5 INL void block_steps_gather_512(const __m512 ax[16], __m512 A, const nvfp4_mse_plan *pl, const float *pow,
                                          __m512 *ev)
{
    __m512 t[8], d[8];
    for (int i = 0; i < pl->steps; i++) {
        __m512 s = step_scale_512(A, pl->p[i]);
        for (int j = 0; j < 8; j++) {
            t[j] = _mm512_mul_ps(s, _mm512_set1_ps(mse_mid[j]));
            d[j] = bf16_round_512(_mm512_mul_ps(s, _mm512_set1_ps(mse_q[j])));   /* R(0 * inf) is NaN too */
        }
        __m512 acc = _mm512_setzero_ps();
        for (int k = 0; k < 16; k++)
            acc = _mm512_add_ps(acc, elem_error_gather_512(ax[k], t, d, pow));
        ev[i] = bf16_round_512(acc);
    }
}

/* arith: the power computed (pow_bf16_512) or gathered from the table. A
 * gather costs about as much as the rest of an element's error on AMD Zen 5,
 * and less than the permutes that replace it on Intel (docs/observers.md). */
static T5 INL void block_errors_512(const uint16_t *p, unsigned ng, const nvfp4_mse_plan *pl, int arith, __m512 *ev)
{
    __m512 ax[16];
    __m512i x2[8];
    load_groups_512(p, ng, x2, ax);
    __m512 amax = ax[0];
    for (int k = 1; k < 16; k++)
        amax = _mm512_max_ps(amax, ax[k]);
    __m512 A = bf16_round_512(_mm512_mul_ps(amax, _mm512_set1_ps(pl->expand)));
    if (!arith) {
        block_steps_gather_512(ax, A, pl, pl->pow, ev);
        return;
    }
    pow_regs_512 pr;
    pow_regs_load_512(pl, &pr);
    if (block_in_range(ax, amax, pl))
        block_steps_512(x2, ax, A, pl, &pr, 0, ev);
    else
        block_steps_512(x2, ax, A, pl, &pr, 1, ev);
}

/* err < best, strictly, step by step: each group's improvement bits (steps
 * below 64) or its last improvement, as the scalar search keeps them */
static T5 void block_select_512(const __m512 *ev, unsigned ng, const nvfp4_mse_plan *pl, uint64_t *mask,
                                uint8_t *idx, uint64_t *any)
{
    __m512 best = _mm512_set1_ps(ff_bf16_to_f32(0x7f7f));
    __m512i bi = _mm512_setzero_si512(), lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    for (int i = 0; i < pl->steps; i++) {
        __mmask16 imp = _mm512_cmp_ps_mask(ev[i], best, _CMP_LT_OQ);
        best = _mm512_mask_mov_ps(best, imp, ev[i]);
        bi = _mm512_mask_mov_epi32(bi, imp, _mm512_set1_epi32(i));
        if (i < 32)
            lo = _mm512_mask_or_epi32(lo, imp, lo, _mm512_set1_epi32((int)(1u << i)));
        else if (i < 64)
            hi = _mm512_mask_or_epi32(hi, imp, hi, _mm512_set1_epi32((int)(1u << (i - 32))));
    }
    uint32_t b[16], l[16], h[16];
    _mm512_storeu_si512(b, bi);
    _mm512_storeu_si512(l, lo);
    _mm512_storeu_si512(h, hi);
    for (unsigned g = 0; g < ng; g++) {
        if (pl->use_mask) {
            mask[g] = l[g] | (uint64_t)h[g] << 32;
            *any |= mask[g];
        } else {
            idx[g] = (uint8_t)b[g];
        }
    }
}

static T5 INL void groups_512(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, int arith,
                              uint64_t *mask, uint8_t *idx, uint64_t *any, float *errs)
{
    __m512 ev[NVFP4_MSE_MAX_STEPS];
    uint64_t acc_any = 0;
    for (uint64_t g0 = 0; g0 < ngroups; g0 += 16) {
        unsigned ng = ngroups - g0 < 16 ? (unsigned)(ngroups - g0) : 16;
        block_errors_512(w + 16 * g0, ng, pl, arith, ev);
        if (!errs) {
            block_select_512(ev, ng, pl, mask ? mask + g0 : NULL, idx ? idx + g0 : NULL, &acc_any);
            continue;
        }
        float e[16];
        for (int i = 0; i < pl->steps; i++) {
            _mm512_storeu_ps(e, ev[i]);
            for (unsigned g = 0; g < ng; g++)
                errs[(g0 + g) * (uint64_t)pl->steps + (uint64_t)i] = e[g];
        }
    }
    if (any)
        *any |= acc_any;
}

/* ------------------------------------------------------------------- AVX2 */

/* r[k] lane g = r[g] lane k for 8 rows of 8 (unpack 32, unpack 64, swap halves) */
static T2 INL void transpose8_256(__m256i r[8])
{
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
    }
}

/* ax[k] lane g = |element k of group g|; groups from ng on read 0 */
static T2 INL void load_groups_256(const uint16_t *p, unsigned ng, __m256 ax[16])
{
    for (int half = 0; half < 2; half++) {
        __m256i r[8];
        for (unsigned g = 0; g < 8; g++)
            r[g] = g < ng ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16 * g + 8 * half)))
                          : _mm256_setzero_si256();
        transpose8_256(r);
        for (int k = 0; k < 8; k++)
            ax[8 * half + k] =
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(r[k], _mm256_set1_epi32(0x7fff)), 16));
    }
}

static T2 INL __m256 elem_error_256(__m256 a, const __m256 *t, const __m256 *d, const float *pow)
{
    __m256 q = d[0];
    q = _mm256_blendv_ps(q, d[1], _mm256_cmp_ps(a, t[1], _CMP_GT_OQ));
    q = _mm256_blendv_ps(q, d[2], _mm256_cmp_ps(a, t[2], _CMP_GE_OQ));
    q = _mm256_blendv_ps(q, d[3], _mm256_cmp_ps(a, t[3], _CMP_GT_OQ));
    q = _mm256_blendv_ps(q, d[4], _mm256_cmp_ps(a, t[4], _CMP_GE_OQ));
    q = _mm256_blendv_ps(q, d[5], _mm256_cmp_ps(a, t[5], _CMP_GT_OQ));
    q = _mm256_blendv_ps(q, d[6], _mm256_cmp_ps(a, t[6], _CMP_GE_OQ));
    q = _mm256_blendv_ps(q, d[7], _mm256_cmp_ps(a, t[7], _CMP_GT_OQ));
    __m256i u = _mm256_and_si256(_mm256_castps_si256(_mm256_sub_ps(a, q)), _mm256_set1_epi32(0x7fffffff));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    return _mm256_i32gather_ps(pow, u, 4);
}

static T2 void block_errors_256(const uint16_t *p, unsigned ng, const nvfp4_mse_plan *pl, __m256 *ev)
{
    __m256 ax[16], t[8], d[8];
    load_groups_256(p, ng, ax);
    __m256 amax = ax[0];
    for (int k = 1; k < 16; k++)
        amax = _mm256_max_ps(amax, ax[k]);
    __m256 A = bf16_round_256(_mm256_mul_ps(amax, _mm256_set1_ps(pl->expand)));
    for (int i = 0; i < pl->steps; i++) {
        __m256 c = bf16_round_256(_mm256_mul_ps(A, _mm256_set1_ps(pl->p[i])));
        __m256 s = bf16_round_256(_mm256_div_ps(c, _mm256_set1_ps(NVFP4_FP4_MAX)));
        s = _mm256_blendv_ps(s, _mm256_set1_ps(BF16_EPS), _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ));
        for (int j = 0; j < 8; j++) {
            t[j] = _mm256_mul_ps(s, _mm256_set1_ps(mse_mid[j]));
            d[j] = bf16_round_256(_mm256_mul_ps(s, _mm256_set1_ps(mse_q[j])));
        }
        __m256 acc = _mm256_setzero_ps();
        for (int k = 0; k < 16; k++)
            acc = _mm256_add_ps(acc, elem_error_256(ax[k], t, d, pl->pow));
        ev[i] = bf16_round_256(acc);
    }
}

static T2 void block_select_256(const __m256 *ev, unsigned ng, const nvfp4_mse_plan *pl, uint64_t *mask,
                                uint8_t *idx, uint64_t *any)
{
    __m256 best = _mm256_set1_ps(ff_bf16_to_f32(0x7f7f));
    __m256i bi = _mm256_setzero_si256(), lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int i = 0; i < pl->steps; i++) {
        __m256 imp = _mm256_cmp_ps(ev[i], best, _CMP_LT_OQ);
        __m256i impi = _mm256_castps_si256(imp);
        best = _mm256_blendv_ps(best, ev[i], imp);
        bi = _mm256_blendv_epi8(bi, _mm256_set1_epi32(i), impi);
        if (i < 32)
            lo = _mm256_or_si256(lo, _mm256_and_si256(impi, _mm256_set1_epi32((int)(1u << i))));
        else if (i < 64)
            hi = _mm256_or_si256(hi, _mm256_and_si256(impi, _mm256_set1_epi32((int)(1u << (i - 32)))));
    }
    uint32_t b[8], l[8], h[8];
    _mm256_storeu_si256((__m256i *)b, bi);
    _mm256_storeu_si256((__m256i *)l, lo);
    _mm256_storeu_si256((__m256i *)h, hi);
    for (unsigned g = 0; g < ng; g++) {
        if (pl->use_mask) {
            mask[g] = l[g] | (uint64_t)h[g] << 32;
            *any |= mask[g];
        } else {
            idx[g] = (uint8_t)b[g];
        }
    }
}

static T2 void groups_256(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                          uint8_t *idx, uint64_t *any, float *errs)
{
    __m256 ev[NVFP4_MSE_MAX_STEPS];
    uint64_t acc_any = 0;
    for (uint64_t g0 = 0; g0 < ngroups; g0 += 8) {
        unsigned ng = ngroups - g0 < 8 ? (unsigned)(ngroups - g0) : 8;
        block_errors_256(w + 16 * g0, ng, pl, ev);
        if (!errs) {
            block_select_256(ev, ng, pl, mask ? mask + g0 : NULL, idx ? idx + g0 : NULL, &acc_any);
            continue;
        }
        float e[8];
        for (int i = 0; i < pl->steps; i++) {
            _mm256_storeu_ps(e, ev[i]);
            for (unsigned g = 0; g < ng; g++)
                errs[(g0 + g) * (uint64_t)pl->steps + (uint64_t)i] = e[g];
        }
    }
    if (any)
        *any |= acc_any;
}

/* -------------------------------------------------- quantizing with ranges */

static T5 void ranges_row_512(const uint16_t *w, uint64_t groups, float gs, const float *gamax, uint8_t *pk,
                              uint8_t *sc)
{
    __m512 gsv = _mm512_set1_ps(gs);
    for (uint64_t g0 = 0; g0 < groups; g0 += 16) {
        unsigned ng = groups - g0 < 16 ? (unsigned)(groups - g0) : 16;
        __mmask16 live = (__mmask16)((1u << ng) - 1);
        float ef[16];
        __m512 eff;
        __m512i code = scales_bf16_512(_mm512_maskz_loadu_ps(live, gamax + g0), gsv, &eff);
        _mm512_storeu_ps(ef, eff);
        _mm512_mask_cvtepi32_storeu_epi8(sc + g0, live, code);
        for (unsigned g = 0; g < ng; g++) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(w + (g0 + g) * 16));
            __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            codes_512(x, _mm512_set1_ps(ef[g]), pk + (g0 + g) * 8);
        }
    }
}

static T2 INL __m256 load8_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static T2 void ranges_row_256(const uint16_t *w, uint64_t groups, float gs, const float *gamax, uint8_t *pk,
                              uint8_t *sc)
{
    __m256 gsv = _mm256_set1_ps(gs);
    for (uint64_t g0 = 0; g0 < groups; g0 += 8) {
        unsigned ng = groups - g0 < 8 ? (unsigned)(groups - g0) : 8;
        float ga[8] = {0}, ef[8];
        int32_t cd[8];
        memcpy(ga, gamax + g0, ng * sizeof *ga);
        __m256 eff;
        _mm256_storeu_si256((__m256i *)cd, scales_bf16_256(_mm256_loadu_ps(ga), gsv, &eff));
        _mm256_storeu_ps(ef, eff);
        for (unsigned g = 0; g < ng; g++) {
            const uint16_t *x = w + (g0 + g) * 16;
            sc[g0 + g] = (uint8_t)cd[g];
            codes_256(load8_bf16(x), load8_bf16(x + 8), _mm256_set1_ps(ef[g]), pk + (g0 + g) * 8);
        }
    }
}

void nvfp4_ranges_rows_avx512(const uint16_t *w, uint64_t cols, uint64_t row0, uint64_t nrows, float gs,
                              const float *gamax, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t r = 0; r < nrows; r++)
        ranges_row_512(w + (row0 + r) * cols, groups, gs, gamax + r * groups,
                       packed + r * (cols / 2), scales + r * groups);
}

void nvfp4_ranges_rows_avx2(const uint16_t *w, uint64_t cols, uint64_t row0, uint64_t nrows, float gs,
                            const float *gamax, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t r = 0; r < nrows; r++)
        ranges_row_256(w + (row0 + r) * cols, groups, gs, gamax + r * groups,
                       packed + r * (cols / 2), scales + r * groups);
}

T5 void nvfp4_mse_groups_avx512(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                                uint8_t *idx, uint64_t *any, float *errs)
{
    groups_512(w, ngroups, pl, 0, mask, idx, any, errs);
}

T5 void nvfp4_mse_groups_avx512_arith(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                                   uint8_t *idx, uint64_t *any, float *errs)
{
    groups_512(w, ngroups, pl, 1, mask, idx, any, errs);
}

void nvfp4_mse_groups_avx2(const uint16_t *w, uint64_t ngroups, const nvfp4_mse_plan *pl, uint64_t *mask,
                           uint8_t *idx, uint64_t *any, float *errs)
{
    groups_256(w, ngroups, pl, mask, idx, any, errs);
}
#endif

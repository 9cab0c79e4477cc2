/* AVX2 and AVX-512 NVFP4 kernels. Each is compiled with a target attribute
 * (no -march flag), so one binary runs on any x86-64 and the dispatcher picks
 * what the CPU has. For f16 and f32 input they repeat the scalar kernel's
 * IEEE operations one for one (two true divisions, RNE roundings, the same
 * buckets), which is why the bytes are identical, not merely close:
 *   amax     max of |x| (NaN lanes ignored, as the scalar `a > m ? a : m`)
 *   s        round_to_dtype(amax / 6) * gs, min 448
 *   s8       RNE to e4m3: 3-bit mantissa rounding on the f32 bits for
 *            normals, rint(s * 512) / 512 below 2^-6; 0 becomes 0.125
 *   eff      s8 / gs;  y = x / eff
 *   code     RNE onto the E2M1 grid (CT's buckets, see codes_512), NaN in
 *            bucket 7; sign bit iff y < 0 (-0.0 gives 0, -tiny gives 8).
 * bf16 input (nearly every checkpoint) keeps amax and s8 but divides
 * nothing: each element's code is read off eight exact 16-bit edges of its
 * group's scale code (nvfp4_thresh.h), found with the scalar arithmetic. */
#include "nvfp4_simd.h"
#include "nvfp4_thresh.h"
#include "nvfp4_codes_simd.h"

#include <float.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL __attribute__((always_inline)) inline


/* ---------------------------------------------------------------- AVX-512 */

/* f32 or f16: bf16 takes the threshold kernel (rows_512_thr). */
static T5 INL __m512 load16_512(const void *w, ff_dtype t, uint64_t i)
{
    if (t == FF_DT_F32)
        return _mm512_loadu_ps((const float *)w + i);
    /* exact, subnormals included */
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
}


/* round_to_dtype for f32 (nothing) and f16: the hardware conversion (IEEE
 * RNE, subnormals and overflow to inf as torch). */
static T5 INL __m512 round_to_512(__m512 s, ff_dtype t)
{
    if (t == FF_DT_F16)
        return _mm512_cvtph_ps(_mm512_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return s;
}

/* Sixteen groups' scales at once: e4m3 codes and the f32 value eff = s8/gs. */
static T5 INL __m512i scales_512(__m512 amax, __m512 gsv, ff_dtype t, __m512 *eff)
{
    return scales_from_512(round_to_512(_mm512_div_ps(amax, _mm512_set1_ps(NVFP4_FP4_MAX)), t), gsv, eff);
}


/* Max of each of 16 vectors, lane g of the result = max of a[g]: a
 * transpose-reduce (unpack, shuffle, then 128-bit lane swaps), ~3 ops a
 * group instead of a full horizontal reduction each. Inputs are NaN-free. */
static T5 INL __m512 max16_512(const __m512 *a)
{
    __m512 c[8], d[4], e[2];
    for (int p = 0; p < 8; p++)
        c[p] = _mm512_max_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]), _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
    for (int q = 0; q < 4; q++)
        d[q] = _mm512_max_ps(_mm512_shuffle_ps(c[2 * q], c[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[2 * q], c[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int r = 0; r < 2; r++)
        e[r] = _mm512_max_ps(_mm512_shuffle_f32x4(d[2 * r], d[2 * r + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(d[2 * r], d[2 * r + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_max_ps(_mm512_shuffle_f32x4(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

static T5 INL void row_512(const void *w, ff_dtype t, uint64_t base, uint64_t groups, __m512 gsv,
                           uint8_t *pk, uint8_t *sc)
{
    for (uint64_t g0 = 0; g0 < groups; g0 += 16) {
        unsigned ng = groups - g0 < 16 ? (unsigned)(groups - g0) : 16;
        __m512 a[16];
        /* max_ps(|x|, 0) turns a NaN lane into 0, as the scalar's
         * `a > m ? a : m` ignores it; padding groups are 0 */
        for (unsigned g = 0; g < 16; g++)
            a[g] = g < ng ? _mm512_max_ps(abs512(load16_512(w, t, base + (g0 + g) * 16)), _mm512_setzero_ps())
                          : _mm512_setzero_ps();
        float ef[16] __attribute__((aligned(64)));
        __m512 eff;
        __m512i code = scales_512(max16_512(a), gsv, t, &eff);
        _mm512_store_ps(ef, eff);
        _mm512_mask_cvtepi32_storeu_epi8(sc + g0, (__mmask16)((1u << ng) - 1), code);
        for (unsigned g = 0; g < ng; g++)
            codes_512(load16_512(w, t, base + (g0 + g) * 16), _mm512_set1_ps(ef[g]), pk + (g0 + g) * 8);
    }
}

static T5 void rows_512_t(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                          float gs, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    __m512 gsv = _mm512_set1_ps(gs);
    for (uint64_t r = 0; r < nrows; r++)
        row_512(w, t, (row0 + r) * cols, groups, gsv, packed + r * (cols / 2), scales + r * groups);
}

/* bf16 takes the threshold kernel (no division: faster than this one on
 * both AMD and Intel, bench/kernels.c, 2026-12-04 in docs/bench.md), at the
 * width nvfp4_quantize_rows_side picks for this kernel, with no side. */
void nvfp4_quantize_rows_avx512(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                                uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales)
{
    if (t == FF_DT_BF16)
        nvfp4_quantize_rows_side(nvfp4_quantize_rows_avx512, w, cols, row0, nrows, gs, packed, scales, NULL);
    else
        rows_512_t(w, t, cols, row0, nrows, gs, packed, scales);
}

/* ------------------------------------------------------------------- AVX2 */

/* f32 or f16: bf16 takes the threshold kernel (rows_256_thr). */
static T2 INL __m256 load8_256(const void *w, ff_dtype t, uint64_t i)
{
    if (t == FF_DT_F32)
        return _mm256_loadu_ps((const float *)w + i);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}

static T2 INL __m256 round_to_256(__m256 s, ff_dtype t)
{
    if (t == FF_DT_F16)
        return _mm256_cvtph_ps(_mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return t == FF_DT_BF16 ? bf16_round_256(s) : s;
}

static T2 INL __m256i scales_256(__m256 amax, __m256 gsv, ff_dtype t, __m256 *eff)
{
    return scales_from_256(round_to_256(_mm256_div_ps(amax, _mm256_set1_ps(NVFP4_FP4_MAX)), t), gsv, eff);
}

/* Max of each of 8 vectors, lane g of the result = max of a[g]: the
 * transpose-reduce of max16_512 (unpack, shuffle, 128-bit lane swap), ~3
 * ops a group instead of a horizontal reduction each. NaN-free inputs. */
static T2 INL __m256 max8_256(const __m256 *a)
{
    __m256 c[4], d[2];
    for (int p = 0; p < 4; p++)
        c[p] = _mm256_max_ps(_mm256_unpacklo_ps(a[2 * p], a[2 * p + 1]), _mm256_unpackhi_ps(a[2 * p], a[2 * p + 1]));
    for (int q = 0; q < 2; q++)
        d[q] = _mm256_max_ps(_mm256_shuffle_ps(c[2 * q], c[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(c[2 * q], c[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes now: d[0] = (g0 g1 g2 g3 | g0 g1 g2 g3) halves, d[1] the same for g4..g7 */
    return _mm256_max_ps(_mm256_permute2f128_ps(d[0], d[1], 0x20), _mm256_permute2f128_ps(d[0], d[1], 0x31));
}

static T2 INL void row_256(const void *w, ff_dtype t, uint64_t base, uint64_t groups, __m256 gsv,
                           uint8_t *pk, uint8_t *sc)
{
    for (uint64_t g0 = 0; g0 < groups; g0 += 8) {
        unsigned ng = groups - g0 < 8 ? (unsigned)(groups - g0) : 8;
        __m256 a[8];
        /* max_ps(|x|, 0) turns a NaN lane into 0, as the scalar's
         * `a > m ? a : m` ignores it; padding groups are 0 */
        for (unsigned g = 0; g < 8; g++) {
            uint64_t i = base + (g0 + g) * 16;
            a[g] = g < ng ? _mm256_max_ps(_mm256_max_ps(abs256(load8_256(w, t, i)), _mm256_setzero_ps()),
                                          abs256(load8_256(w, t, i + 8)))
                          : _mm256_setzero_ps();
        }
        float ef[8] __attribute__((aligned(32)));
        int32_t cd[8] __attribute__((aligned(32)));
        __m256 eff;
        _mm256_store_si256((__m256i *)cd, scales_256(max8_256(a), gsv, t, &eff));
        _mm256_store_ps(ef, eff);
        for (unsigned g = 0; g < ng; g++) {
            uint64_t i = base + (g0 + g) * 16;
            sc[g0 + g] = (uint8_t)cd[g];
            codes_256(load8_256(w, t, i), load8_256(w, t, i + 8), _mm256_set1_ps(ef[g]), pk + (g0 + g) * 8);
        }
    }
}

/* Sixteen bf16 codes by the exact thresholds of the group's scale code:
 * the bucket is how many edges |x| passes; the sign bit needs x < 0 (NaN
 * bits excluded: as int16 they sit in -127..-1, above -Inf's -128) and
 * x / eff != 0, as the scalar's y < 0. */
static T2 INL __m256i codes16_thr(__m256i x, const nvfp4_thr *e)
{
    __m256i mag = _mm256_and_si256(x, _mm256_set1_epi16(0x7fff));
    __m256i below = _mm256_setzero_si256();
#pragma GCC unroll 7
    for (int k = 0; k < 7; k++)
        below = _mm256_sub_epi16(below, _mm256_cmpgt_epi16(mag, _mm256_set1_epi32(e->edge[k])));
    __m256i neg = _mm256_cmpgt_epi16(_mm256_set1_epi16(-127), x);
    __m256i nonzero = _mm256_cmpgt_epi16(mag, _mm256_set1_epi32(e->edge[7]));
    return _mm256_or_si256(below, _mm256_and_si256(_mm256_and_si256(neg, nonzero), _mm256_set1_epi16(8)));
}

/* Four groups' i16 codes to 32 bytes: madd makes each pair even + 16 * odd
 * in one dword, two unsigned packs narrow to bytes (lane-interleaved), and
 * one dword permute puts the groups back in order. */
static T2 INL __m256i pack4_thr(__m256i a, __m256i b, __m256i c, __m256i d)
{
    const __m256i nib = _mm256_set1_epi32(0x00100001);
    __m256i ab = _mm256_packus_epi32(_mm256_madd_epi16(a, nib), _mm256_madd_epi16(b, nib));
    __m256i cd = _mm256_packus_epi32(_mm256_madd_epi16(c, nib), _mm256_madd_epi16(d, nib));
    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Group maxima of |x| for eight bf16 groups in the integer domain: |x|'s
 * bits order as its value, so a transpose-reduce of 16-bit maxima (unpack
 * 16, 32, 64, then the two 128-bit halves) gives lane g = max of group g.
 * NaN bits are moved below zero first (+0x7f wraps them negative as int16)
 * so a signed max ignores them, as the scalar's `a > m ? a : m` does. */
static T2 INL __m256 amax8_bf16(const uint16_t *p)
{
    __m256i m[8], t[4], u[2];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        m[g] = _mm256_add_epi16(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + g * 16)),
                                                 _mm256_set1_epi16(0x7fff)),
                                _mm256_set1_epi16(0x7f));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        t[q] = _mm256_max_epi16(_mm256_unpacklo_epi16(m[2 * q], m[2 * q + 1]), _mm256_unpackhi_epi16(m[2 * q], m[2 * q + 1]));
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++)
        u[q] = _mm256_max_epi16(_mm256_unpacklo_epi32(t[2 * q], t[2 * q + 1]), _mm256_unpackhi_epi32(t[2 * q], t[2 * q + 1]));
    __m256i v = _mm256_max_epi16(_mm256_unpacklo_epi64(u[0], u[1]), _mm256_unpackhi_epi64(u[0], u[1]));
    __m128i h = _mm_max_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_sub_epi16(_mm_max_epi16(h, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7f));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Groups are quantized a chunk at a time in two phases: every group's
 * scale, then every group's codes. A scale is a long chain (the maxima, a
 * division, the e4m3 rounding, the edge table's address) that the compares
 * wait on; block by block of eight groups the reorder window held little
 * more than one block, so each chain stalled its compares. bench/kernels.c,
 * one core: Intel host 3.8-4.1 GB/s block by block, 4.8-5.0 in chunks; AMD
 * VM 6.9 and 8.4-8.6. 24 groups was at or near the best of 16 to 256 on
 * both; its 768 bytes of bf16 are still in L1 for the second phase. */
#define THR_CHUNK_GROUPS 24
/* The AVX-512 chunks, their scales sixteen groups a step, wanted more
 * groups in flight: bench-kernels on the AMD VM, 16 groups 12.1 GB/s, 24
 * 14.4, 32 16.5, 48 to 256 18.3-19.0 (2026-12-07, docs/bench.md). */
#define THR_CHUNK_GROUPS_512 64
/* The kernel asks for its input a page ahead: the hardware prefetchers stop
 * at each 4 KB page, and in a quantize run, its rows coming from DRAM, the
 * Intel host's kernel waited on them (bench/kernels.c cannot show it there:
 * its 231 MB matrix sits in that CPU's 300 MB L3). bench/ab.sh, 2 threads,
 * 4.34 GB: 0.84-1.01 s with it against 1.03-1.27 s without. The AMD VM's
 * kernel figures do not move. */
#define PREFETCH_AHEAD 4096

/* Eight groups' scale bytes to sc, their scale codes to cd and their edges'
 * byte offsets in tt->code to off; the lanes whose codes have no edges in
 * bits (tt->built_bits) come back set. */
static T2 INL __m256i scales8_step(const uint16_t *p, __m256 gsv, __m256i bits, uint8_t *sc, int32_t *cd,
                                   int32_t *off)
{
    /* an address past a row's padded copy is fine: prefetches never fault */
    for (unsigned l = 0; l < 4; l++)
        _mm_prefetch((const char *)((uintptr_t)p + PREFETCH_AHEAD + l * 64), _MM_HINT_T0);
    __m256 eff;
    __m256i codes = scales_bf16_256(amax8_bf16(p), gsv, &eff);
    __m256i idx = _mm256_and_si256(codes, _mm256_set1_epi32(0x7f));
    _mm256_store_si256((__m256i *)cd, idx);
    _mm256_store_si256((__m256i *)off, _mm256_slli_epi32(idx, 5));
    store_scale_bytes8(codes, sc);
    /* whether each code's edges are built, from the bitmap (four words, one
     * permute a vector): a byte load and test a group cost a tenth of the
     * AVX-512 kernel */
    __m256i word = _mm256_permutevar8x32_epi32(bits, _mm256_srli_epi32(idx, 5));
    __m256i bit = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_and_si256(idx, _mm256_set1_epi32(31)));
    return _mm256_cmpeq_epi32(_mm256_and_si256(word, bit), _mm256_setzero_si256());
}

/* Phase one of a chunk: ng groups' (a multiple of 8, at most
 * THR_CHUNK_GROUPS) scale bytes to sc, and each group's edges' byte offset
 * in tt->code to off, the edges of scale codes new to tt built. */
static T2 INL void chunk_scales(const uint16_t *p, unsigned ng, __m256 gsv, nvfp4_thr_table *tt, uint8_t *sc,
                                int32_t *off)
{
    int32_t cd[THR_CHUNK_GROUPS] __attribute__((aligned(32)));
    _Static_assert(sizeof(nvfp4_thr) == 32, "the offsets below shift by 5");
    __m256i bits = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)tt->built_bits));
    __m256i unbuilt = _mm256_setzero_si256();
    for (unsigned g0 = 0; g0 < ng; g0 += 8)
        unbuilt = _mm256_or_si256(unbuilt, scales8_step(p + g0 * 16, gsv, bits, sc + g0, cd + g0, off + g0));
    if (__builtin_expect(!_mm256_testz_si256(unbuilt, unbuilt), 0))
        nvfp4_thr_build_codes(tt, cd, ng);
}

/* amax8_bf16 for sixteen groups, each register two of them (group 2k in
 * its low 256 bits, 2k+1 in its high). After the same transpose-reduce,
 * word k of 128-bit lane L holds register k's lane L's maximum: a swap of
 * lane pairs finishes each group, and one word permute puts them in order. */
static T5 INL __m512 amax16_bf16(const uint16_t *p)
{
    static const uint16_t order[32] __attribute__((aligned(64))) = {0, 16, 1, 17, 2, 18, 3, 19,
                                                                    4, 20, 5, 21, 6, 22, 7, 23};
    __m512i m[8], t[4], u[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        m[k] = _mm512_add_epi16(_mm512_and_si512(_mm512_loadu_si512(p + k * 32), _mm512_set1_epi16(0x7fff)),
                                _mm512_set1_epi16(0x7f));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        t[q] = _mm512_max_epi16(_mm512_unpacklo_epi16(m[2 * q], m[2 * q + 1]),
                                _mm512_unpackhi_epi16(m[2 * q], m[2 * q + 1]));
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++)
        u[q] = _mm512_max_epi16(_mm512_unpacklo_epi32(t[2 * q], t[2 * q + 1]),
                                _mm512_unpackhi_epi32(t[2 * q], t[2 * q + 1]));
    __m512i v = _mm512_max_epi16(_mm512_unpacklo_epi64(u[0], u[1]), _mm512_unpackhi_epi64(u[0], u[1]));
    v = _mm512_max_epi16(v, _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    __m256i h = _mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(order), v));
    h = _mm256_sub_epi16(_mm256_max_epi16(h, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* scales8_step for sixteen groups; the unbuilt lanes as a mask. */
static T5 INL __mmask16 scales16_step(const uint16_t *p, __m512 gsv, __m512i bits, uint8_t *sc, int32_t *cd,
                                      int32_t *off)
{
    for (unsigned l = 0; l < 8; l++)
        _mm_prefetch((const char *)((uintptr_t)p + PREFETCH_AHEAD + l * 64), _MM_HINT_T0);
    __m512 eff;
    __m512i codes = scales_bf16_512(amax16_bf16(p), gsv, &eff);
    __m512i idx = _mm512_and_si512(codes, _mm512_set1_epi32(0x7f));
    _mm512_store_si512(cd, idx);
    _mm512_store_si512(off, _mm512_slli_epi32(idx, 5));
    _mm_storeu_si128((__m128i *)sc, _mm512_cvtepi32_epi8(codes));
    __m512i word = _mm512_permutexvar_epi32(_mm512_srli_epi32(idx, 5), bits);
    __m512i bit = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_and_si512(idx, _mm512_set1_epi32(31)));
    return _mm512_testn_epi32_mask(word, bit);
}

/* chunk_scales sixteen groups a step, a last eight at 256 bits. */
static T5 INL void chunk_scales_512(const uint16_t *p, unsigned ng, __m256 gsv, nvfp4_thr_table *tt, uint8_t *sc,
                                    int32_t *off)
{
    int32_t cd[THR_CHUNK_GROUPS_512] __attribute__((aligned(64)));
    __m128i map = _mm_loadu_si128((const __m128i *)tt->built_bits);
    __m512 gsv16 = _mm512_set1_ps(_mm256_cvtss_f32(gsv));
    __mmask16 unbuilt = 0;
    unsigned g0 = 0;
    for (; g0 + 16 <= ng; g0 += 16)
        unbuilt |= scales16_step(p + g0 * 16, gsv16, _mm512_castsi128_si512(map), sc + g0, cd + g0, off + g0);
    __m256i rest = _mm256_setzero_si256();
    if (g0 < ng)
        rest = scales8_step(p + g0 * 16, gsv, _mm256_castsi128_si256(map), sc + g0, cd + g0, off + g0);
    if (__builtin_expect(unbuilt || !_mm256_testz_si256(rest, rest), 0))
        nvfp4_thr_build_codes(tt, cd, ng);
}

/* ng groups (a multiple of 8, at most THR_CHUNK_GROUPS) at p: ng scale
 * bytes to sc, 8 * ng packed bytes to pk. */
static T2 INL void chunk_thr(const uint16_t *p, unsigned ng, __m256 gsv, nvfp4_thr_table *tt, uint8_t *pk,
                             uint8_t *sc)
{
    int32_t off[THR_CHUNK_GROUPS] __attribute__((aligned(32)));
    chunk_scales(p, ng, gsv, tt, sc, off);
    /* four groups a step: with eight, their codes outgrew the 16 registers */
    for (unsigned g0 = 0; g0 < ng; g0 += 4) {
        __m256i c[4];
#pragma GCC unroll 4
        for (unsigned g = 0; g < 4; g++)
            c[g] = codes16_thr(_mm256_loadu_si256((const __m256i *)(p + (g0 + g) * 16)),
                               (const nvfp4_thr *)((const char *)tt->code + off[g0 + g]));
        _mm256_storeu_si256((__m256i *)(pk + g0 * 8), pack4_thr(c[0], c[1], c[2], c[3]));
    }
}

/* Two groups' codes (32 bf16 x) against their edges e: the first group's
 * nvfp4_thr in words 0-15, the second's in 16-31, edge k in word 2k of
 * each. The bucket (how many of edges 0-6 |x| passes; they are sorted) is a
 * binary search, edge 3, then 1 or 5, then 0, 2, 4 or 6, each edge fetched
 * by a word permute on the offset found so far: three compares where
 * codes16_thr makes seven. */
static T5 INL __m512i codes32_thr_512(__m512i x, __m512i e)
{
    const __m512i half = _mm512_set_epi64(0x0010001000100010, 0x0010001000100010, 0x0010001000100010,
                                          0x0010001000100010, 0, 0, 0, 0);   /* the second group's words */
    __m512i mag = _mm512_and_si512(x, _mm512_set1_epi16(0x7fff));
    /* at: twice the bucket so far, the word offset of its next edges */
    __m512i at = _mm512_maskz_mov_epi16(
        _mm512_cmpgt_epi16_mask(mag, _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16(6)), e)),
        _mm512_set1_epi16(8));
    __mmask32 up = _mm512_cmpgt_epi16_mask(
        mag, _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_add_epi16(half, at), _mm512_set1_epi16(2)), e));
    at = _mm512_mask_add_epi16(at, up, at, _mm512_set1_epi16(4));
    up = _mm512_cmpgt_epi16_mask(mag, _mm512_permutexvar_epi16(_mm512_add_epi16(half, at), e));
    __m512i bucket = _mm512_srli_epi16(_mm512_mask_add_epi16(at, up, at, _mm512_set1_epi16(2)), 1);
    /* the sign bit: x < 0 (NaN excluded, as codes16_thr) and past edge 7 */
    __mmask32 neg = _mm512_cmpgt_epi16_mask(_mm512_set1_epi16(-127), x);
    __mmask32 sign = _mm512_mask_cmpgt_epi16_mask(
        neg, mag, _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16(14)), e));
    return _mm512_mask_add_epi16(bucket, sign, bucket, _mm512_set1_epi16(8));
}

/* Eight groups' 16-bit codes (two groups a register) to 64 packed bytes:
 * madd pairs even + 16 * odd, two packs narrow (each 128-bit lane then
 * holding a dword of every register), one dword permute puts them back. */
static T5 INL __m512i pack8_thr_512(const __m512i *c)
{
    const __m512i nib = _mm512_set1_epi32(0x00100001);
    __m512i ab = _mm512_packus_epi32(_mm512_madd_epi16(c[0], nib), _mm512_madd_epi16(c[1], nib));
    __m512i cd = _mm512_packus_epi32(_mm512_madd_epi16(c[2], nib), _mm512_madd_epi16(c[3], nib));
    /* dword 4L + r holds register r's lane L */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(order, _mm512_packus_epi16(ab, cd));
}

/* chunk_thr with the codes found two groups a register. */
static T5 INL void chunk_thr_512(const uint16_t *p, unsigned ng, __m256 gsv, nvfp4_thr_table *tt, uint8_t *pk,
                                 uint8_t *sc)
{
    int32_t off[THR_CHUNK_GROUPS_512] __attribute__((aligned(64)));
    chunk_scales_512(p, ng, gsv, tt, sc, off);
    for (unsigned g0 = 0; g0 < ng; g0 += 8) {
        __m512i c[4];
#pragma GCC unroll 4
        for (unsigned r = 0; r < 4; r++) {
            unsigned g = g0 + 2 * r;
            __m512i e = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)((const char *)tt->code + off[g]))),
                _mm256_loadu_si256((const __m256i *)((const char *)tt->code + off[g + 1])), 1);
            c[r] = codes32_thr_512(_mm512_loadu_si512(p + g * 16), e);
        }
        _mm512_storeu_si512(pk + g0 * 8, pack8_thr_512(c));
    }
}

/* Max of |x| bits over n (a multiple of 16) side elements, asking for them
 * a page ahead as the kernel asks for its own. */
static T2 INL __m256i side_max_256(const uint16_t *p, uint64_t n, __m256i acc)
{
    for (uint64_t i = 0; i < n; i += 32)
        _mm_prefetch((const char *)((uintptr_t)(p + i) + PREFETCH_AHEAD), _MM_HINT_T0);
    for (uint64_t i = 0; i < n; i += 16)
        acc = _mm256_max_epu16(acc, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)),
                                                      _mm256_set1_epi16(0x7fff)));
    return acc;
}

/* Max of best and the |x| bits of n bf16 elements (|bf16| orders as its bits):
 * the lanes of a vector max, and what is left after the last whole vector. */
static uint16_t bf16_mag_max(const uint16_t *p, uint64_t n, uint16_t best)
{
    for (uint64_t i = 0; i < n; i++) {
        uint16_t a = p[i] & 0x7fff;
        best = a > best ? a : best;
    }
    return best;
}

/* Where the kernel is in the side: a slice of `step` elements after each
 * whole chunk, sized so the side ends with the rows; what rounding leaves
 * is read at the end. */
typedef struct side_cursor {
    nvfp4_side *side;
    uint64_t at, step;
    __m256i acc;
} side_cursor;

static T2 INL void side_step(side_cursor *cur)
{
    const nvfp4_side *sd = cur->side;
    uint64_t take = sd->n - cur->at < cur->step ? (sd->n - cur->at) & ~(uint64_t)15 : cur->step;
    cur->acc = side_max_256(sd->p + cur->at, take, cur->acc);
    cur->at += take;
}

static T2 void side_finish(side_cursor *cur)
{
    nvfp4_side *sd = cur->side;
    uint64_t rest = (sd->n - cur->at) & ~(uint64_t)15;
    __m256i acc = side_max_256(sd->p + cur->at, rest, cur->acc);
    uint16_t m[16];
    _mm256_storeu_si256((__m256i *)m, acc);
    sd->max = bf16_mag_max(m, 16, bf16_mag_max(sd->p + cur->at + rest, sd->n - cur->at - rest, 0));
}

/* The threshold kernel's rows at one width, CHUNK (chunk_thr or
 * chunk_thr_512) doing the groups: a macro, as a function of the AVX2
 * target cannot inline the AVX-512 chunk, nor one of no target either.
 * A row's last partial block of eight goes through a zero-padded copy, so
 * the chunks have no per-group bounds; side (or NULL): another tensor's
 * elements read along, their max |x| to side->max. */
#define DEFINE_ROWS_THR(ROWS, ROW, TARGET, CHUNK, CHUNK_GROUPS)                                                                 \
    static TARGET INL void ROW(const uint16_t *w, uint64_t groups, __m256 gsv, nvfp4_thr_table *tt, uint8_t *pk, \
                               uint8_t *sc, side_cursor *cur)                                                    \
    {                                                                                                            \
        uint64_t g0 = groups & ~(uint64_t)7; /* the partial block's first group */                               \
        for (uint64_t c0 = 0; c0 < g0; c0 += CHUNK_GROUPS) {                                                 \
            unsigned ng = g0 - c0 < CHUNK_GROUPS ? (unsigned)(g0 - c0) : CHUNK_GROUPS;                   \
            CHUNK(w + c0 * 16, ng, gsv, tt, pk + c0 * 8, sc + c0);                                               \
            if (cur)                                                                                             \
                side_step(cur);                                                                                  \
        }                                                                                                        \
        if (g0 < groups) {                                                                                       \
            unsigned ng = (unsigned)(groups - g0);                                                               \
            uint16_t in[8 * 16] = {0};                                                                           \
            uint8_t packed[64], scales[8];                                                                       \
            memcpy(in, w + g0 * 16, ng * 16 * sizeof *in);                                                       \
            CHUNK(in, 8, gsv, tt, packed, scales);                                                               \
            memcpy(pk + g0 * 8, packed, ng * 8);                                                                 \
            memcpy(sc + g0, scales, ng);                                                                         \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    static TARGET void ROWS(const void *w, uint64_t c, uint64_t r0, uint64_t n, float gs, uint8_t *p, uint8_t *s, \
                            nvfp4_side *side)                                                                    \
    {                                                                                                            \
        uint64_t groups = c / NVFP4_GROUP;                                                                       \
        __m256 gsv = _mm256_set1_ps(gs);                                                                         \
        nvfp4_thr_table tt;                                                                                      \
        nvfp4_thr_init(&tt, gs);                                                                                 \
        side_cursor cur = {.side = side, .acc = _mm256_setzero_si256()};                                         \
        if (side) {                                                                                              \
            uint64_t chunks = n * (((groups & ~(uint64_t)7) + CHUNK_GROUPS - 1) / CHUNK_GROUPS);         \
            cur.step = chunks ? (side->n / chunks + 15) & ~(uint64_t)15 : 0;                                     \
        }                                                                                                        \
        for (uint64_t r = 0; r < n; r++)                                                                         \
            ROW((const uint16_t *)w + (r0 + r) * c, groups, gsv, &tt, p + r * (c / 2), s + r * groups,           \
                side ? &cur : NULL);                                                                             \
        if (side)                                                                                                \
            side_finish(&cur);                                                                                   \
    }

DEFINE_ROWS_THR(rows_256_thr, row_256_thr, T2, chunk_thr, THR_CHUNK_GROUPS)
DEFINE_ROWS_THR(rows_512_thr, row_512_thr, T5, chunk_thr_512, THR_CHUNK_GROUPS_512)

static T2 void rows_256_t(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                          float gs, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    __m256 gsv = _mm256_set1_ps(gs);
    for (uint64_t r = 0; r < nrows; r++)
        row_256(w, t, (row0 + r) * cols, groups, gsv, packed + r * (cols / 2), scales + r * groups);
}

void nvfp4_quantize_rows_avx2(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                              uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales)
{
    if (t == FF_DT_BF16)
        rows_256_thr(w, cols, row0, nrows, gs, packed, scales, NULL);
    else
        rows_256_t(w, t, cols, row0, nrows, gs, packed, scales);
}

/* ------------------------------------------------------------ absmax */

/* Vector max of |x| over bf16; any NaN/Inf (|x| bits >= 0x7f80) sends the
 * caller to the scalar routine, which names the first bad element. */
static T5 int absmax_bf16_512(const uint16_t *p, uint64_t n, float *amax)
{
    __m512i acc = _mm512_setzero_si512();
    const __m512i mask = _mm512_set1_epi16(0x7fff);
    uint64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = _mm512_and_si512(_mm512_loadu_si512((const void *)(p + i)), mask);
        acc = _mm512_max_epu16(acc, a);   /* |bf16| orders as its bits */
    }
    uint16_t m[32];
    _mm512_storeu_si512((void *)m, acc);
    uint16_t best = bf16_mag_max(m, 32, bf16_mag_max(p + i, n - i, 0));
    if (best >= 0x7f80)
        return 1;
    *amax = ff_bf16_to_f32(best);
    return 0;
}

static T2 int absmax_bf16_256(const uint16_t *p, uint64_t n, float *amax)
{
    __m256i acc = _mm256_setzero_si256();
    const __m256i mask = _mm256_set1_epi16(0x7fff);
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm256_max_epu16(acc, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), mask));
    uint16_t m[16];
    _mm256_storeu_si256((__m256i *)m, acc);
    uint16_t best = bf16_mag_max(m, 16, bf16_mag_max(p + i, n - i, 0));
    if (best >= 0x7f80)
        return 1;
    *amax = ff_bf16_to_f32(best);
    return 0;
}
#endif

int nvfp4_side_ok(nvfp4_rows_fn k)
{
#if defined(__x86_64__)
    return k == nvfp4_quantize_rows_avx2 || k == nvfp4_quantize_rows_avx512;
#else
    (void)k;
    return 0;
#endif
}

void nvfp4_quantize_rows_side(nvfp4_rows_fn k, const void *w, uint64_t cols, uint64_t row0, uint64_t nrows,
                              float gs, uint8_t *packed, uint8_t *scales, nvfp4_side *side)
{
#if defined(__x86_64__)
    /* the 512-bit codes on every AVX-512 CPU: on the lent hosts' Intel Xeon
     * bench-kernels gave 7.5-8.9 GB/s a core against 5.8-7.8 for the AVX2
     * codes in the same runs (docs/bench.md, "The bf16 scales at 512 bits") */
    if (k == nvfp4_quantize_rows_avx512)
        rows_512_thr(w, cols, row0, nrows, gs, packed, scales, side);
    else
        rows_256_thr(w, cols, row0, nrows, gs, packed, scales, side);
#else
    (void)k, (void)w, (void)cols, (void)row0, (void)nrows, (void)gs, (void)packed, (void)scales, (void)side;
#endif
}

int nvfp4_absmax_fast(const void *data, ff_dtype t, uint64_t n, float *amax, uint64_t *bad)
{
#if defined(__x86_64__)
    if (t == FF_DT_BF16) {
        int r = -1;
        if (nvfp4_cpu_avx512_ok())
            r = absmax_bf16_512(data, n, amax);
        else if (nvfp4_cpu_avx2_ok())
            r = absmax_bf16_256(data, n, amax);
        if (r == 0)
            return 0;
    }
#endif
    return nvfp4_absmax(data, t, n, amax, bad);
}

/* The code-space NVFP4 kernel (nvfp4_code_rows.h), AVX2 and AVX-512. It repeats the
 * bf16 threshold kernel's decisions (rows_256_thr in nvfp4_simd.c) on the
 * codes: the same scales_bf16_256 call on the same maxima, the same edge
 * table, each edge moved into code space by a search of the block's
 * magnitudes (monotone, so "mag[c] > edge" is "c > the last code at or
 * below the edge"). */
#include "nvfp4_code_rows.h"

#include <string.h>

#include "nvfp4.h"
#include "nvfp4_thresh.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "nvfp4_codes_simd.h"
#include "nvfp4_simd.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL __attribute__((always_inline)) inline

#define NAN_MAG 0x7f
/* an edge table entry not yet built: every byte -128, below any edge (-1..126) */
#define UNBUILT 0x80
#define GROUPS_PER_BLOCK (NVFP4_CODE_BLOCK / NVFP4_GROUP)

/* One block's edges in code space for each scale code met so far: c[k] is
 * the last code whose magnitude is at or below edge k (-1: none), so an
 * element's bucket counts the c[k] its code passes, as int8 compares. */
typedef struct code_edges {
    int8_t c[8];
} code_edges;

typedef struct block_cache {
    code_edges e[128];
    uint16_t mag16[128];   /* mag[c] >> 16, for the AVX-512 carry's compares */
    /* the scale code of a group whose largest magnitude code is c: a
     * function of the block and c alone, so found once per block for all
     * 128 instead of once per group */
    uint8_t scale[128];
} block_cache;

/* whether scale code key's edges are carried yet (UNBUILT: not) */
static int edges_built(const block_cache *bc, unsigned key)
{
    return bc->e[key].c[0] != (int8_t)UNBUILT;
}

/* The last code c <= 126 with mag[c] <= top, or -1: a binary search, mag
 * being sorted. */
static int search_last(const uint32_t *mag, uint32_t top)
{
    if (mag[0] > top)
        return -1;
    int pos = 0;
    for (int bit = 64; bit; bit >>= 1)
        if (pos + bit <= 126 && mag[pos + bit] <= top)
            pos += bit;
    return pos;
}

/* E4M3's largest magnitude code whose value is at most q >= 0. */
static int e4m3_floor_code(float q)
{
    if (!(q < 448.0f))
        return 126;
    if (q < 0x1p-6f)
        return (int)(q * 512.0f);   /* subnormals: c * 2^-9 */
    uint32_t b;
    memcpy(&b, &q, sizeof b);
    return (int)(b >> 20) - 960;    /* (exponent + 7) << 3 | top 3 mantissa bits */
}

/* The last code c <= 126 whose magnitude is at or below the 16-bit edge, or
 * -1. The edge times the block's 1 / unit, floored to a code, is that code or a
 * neighbour of it (the decoder's roundings move a value by less than E4M3's
 * spacing); each guess is checked against mag, so a guess that misses (bf16
 * underflow, a tiny unit) costs the search and nothing else. */
static int last_at_or_below(const nvfp4_code_block *blk, uint32_t edge)
{
    const uint32_t *mag = blk->mag;
    uint32_t top = edge << 16 | 0xffffu, bits = edge << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    int c = e4m3_floor_code(value * blk->inv_unit);
    for (int tries = 0; tries < 3; tries++) {
        int at_or_below = c < 0 || mag[c] <= top, next_above = c == 126 || mag[c + 1] > top;
        if (at_or_below && next_above && (c >= 0 || mag[0] > top))
            return c;
        c += at_or_below ? 1 : -1;
    }
    return search_last(mag, top);
}

/* Kept out of line and cold, as nvfp4_thr_build_codes is: about 1 group in
 * 41 meets a scale code its block has not seen (the Kimi-K2 FP8 synth). */
__attribute__((cold, noinline)) static void carry_edges(const nvfp4_code_block *blk, nvfp4_thr_table *tt,
                                                       block_cache *bc, const int32_t *codes, unsigned n)
{
    nvfp4_thr_build_codes(tt, codes, n);
    for (unsigned g = 0; g < n; g++) {
        unsigned key = (unsigned)codes[g];
        if (edges_built(bc, key))
            continue;
        for (int k = 0; k < 8; k++)
            bc->e[key].c[k] = (int8_t)last_at_or_below(blk, (uint32_t)tt->code[key].edge[k] & 0xffffu);
    }
}

/* Byte g of the result (g < 8) is the largest byte of group g, for eight
 * groups of 16 bytes in m[0..3] (two a register): unpack and max across the
 * registers, then shifts within each 128-bit lane. */
static T2 INL __m128i group_max8(const __m256i *m)
{
    __m256i t = _mm256_max_epu8(_mm256_unpacklo_epi8(m[0], m[1]), _mm256_unpackhi_epi8(m[0], m[1]));
    __m256i u = _mm256_max_epu8(_mm256_unpacklo_epi8(m[2], m[3]), _mm256_unpackhi_epi8(m[2], m[3]));
    __m256i v = _mm256_max_epu8(_mm256_unpacklo_epi16(t, u), _mm256_unpackhi_epi16(t, u));
    v = _mm256_max_epu8(v, _mm256_srli_si256(v, 8));
    v = _mm256_max_epu8(v, _mm256_srli_si256(v, 4));
    /* lane 0's first dword holds groups 0 2 4 6, lane 1's 1 3 5 7 */
    return _mm_unpacklo_epi8(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* Two groups' codes (their bytes a, magnitudes m) against their edges.
 * The count of c[0..6] that m passes is a binary search, the edges being
 * sorted: c[3] decides 4, then c[1] or c[5] decides 2, then c[0], c[2],
 * c[4] or c[6] decides 1, each edge fetched by the bits found so far. Three
 * compares and their shuffles instead of seven. */
static T2 INL __m256i edges2(const code_edges *lo, const code_edges *hi)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)lo)),
                                   _mm_loadl_epi64((const __m128i *)hi), 1);
}

static T2 INL __m256i codes32(__m256i a, __m256i m, __m256i e)
{
    __m256i four = _mm256_and_si256(_mm256_cmpgt_epi8(m, _mm256_shuffle_epi8(e, _mm256_set1_epi8(3))),
                                    _mm256_set1_epi8(4));
    __m256i two = _mm256_and_si256(
        _mm256_cmpgt_epi8(m, _mm256_shuffle_epi8(e, _mm256_or_si256(four, _mm256_set1_epi8(1)))),
        _mm256_set1_epi8(2));
    __m256i upper = _mm256_or_si256(four, two);
    __m256i below = _mm256_sub_epi8(upper, _mm256_cmpgt_epi8(m, _mm256_shuffle_epi8(e, upper)));
    __m256i nonzero = _mm256_cmpgt_epi8(m, _mm256_shuffle_epi8(e, _mm256_set1_epi8(7)));
    __m256i neg = _mm256_cmpgt_epi8(_mm256_setzero_si256(), a);
    return _mm256_or_si256(below, _mm256_and_si256(_mm256_and_si256(neg, nonzero), _mm256_set1_epi8(8)));
}

/* Four groups' code bytes (two registers) as 32 packed bytes in order:
 * each pair even + 16 * odd, narrowed, the 64-bit quarters put back. */
static T2 INL __m256i pack4(__m256i c01, __m256i c23)
{
    const __m256i nib = _mm256_set1_epi16(0x1001);
    __m256i p = _mm256_packus_epi16(_mm256_maddubs_epi16(c01, nib), _mm256_maddubs_epi16(c23, nib));
    return _mm256_permute4x64_epi64(p, 0xD8);
}

/* A block's 128 codes with the block's sign flip applied, and their
 * magnitudes. */
static T2 INL void load_block(const uint8_t *p, __m256i flip, __m256i *a, __m256i *m)
{
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        a[i] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 32 * i)), flip);
        m[i] = _mm256_and_si256(a[i], _mm256_set1_epi8(0x7f));
    }
}

/* Each largest code's scale code for one block (block_cache.scale): the
 * bf16 kernel's scales_bf16_256 on the magnitudes themselves, eight codes
 * a call. Code 127 (NaN) is never decoded; its group is reported instead. */
static T2 void block_scale_table(const nvfp4_code_block *blk, __m256 gsv, uint8_t *scale)
{
    for (int c = 0; c < 128; c += 8) {
        __m256 eff;
        __m256i codes = scales_bf16_256(_mm256_loadu_ps((const float *)blk->mag + c), gsv, &eff);
        store_scale_bytes8(codes, scale + c);
    }
}

/* Phase one for a block's eight groups: scale bytes to sc, their codes
 * (the edge table's keys) to key, read off the block's table by each
 * group's largest magnitude code; a NaN magnitude (0x7f) sets *nan. */
static T2 INL void block_scales(const uint8_t *p, const nvfp4_code_block *blk, const block_cache *bc, int32_t *key,
                                uint8_t *sc, uint64_t *nan)
{
    __m256i a[4], m[4];
    load_block(p, _mm256_set1_epi8((char)blk->flip), a, m);
    uint8_t top[16];
    _mm_storeu_si128((__m128i *)top, group_max8(m));
#pragma GCC unroll 8
    for (int g = 0; g < GROUPS_PER_BLOCK; g++) {
        uint8_t code = bc->scale[top[g]];
        *nan |= top[g] == NAN_MAG;
        sc[g] = code;
        key[g] = code & 0x7f;
    }
}

/* Phase two: the block's 64 packed bytes, its edges carried first where
 * a scale code is new to it. */
static T2 INL void block_codes(const uint8_t *p, const nvfp4_code_block *blk, nvfp4_thr_table *tt,
                               block_cache *bc, const int32_t *key, uint8_t *pk)
{
    __m256i a[4], m[4], c[4], e[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        e[i] = edges2(&bc->e[key[2 * i]], &bc->e[key[2 * i + 1]]);
    /* an entry not yet built holds UNBUILT (-128), below every edge */
    __m256i low = _mm256_min_epi8(_mm256_min_epi8(e[0], e[1]), _mm256_min_epi8(e[2], e[3]));
    if (__builtin_expect(_mm256_movemask_epi8(_mm256_cmpeq_epi8(low, _mm256_set1_epi8((char)UNBUILT))), 0)) {
        carry_edges(blk, tt, bc, key, GROUPS_PER_BLOCK);
        for (int i = 0; i < 4; i++)
            e[i] = edges2(&bc->e[key[2 * i]], &bc->e[key[2 * i + 1]]);
    }
    load_block(p, _mm256_set1_epi8((char)blk->flip), a, m);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        c[i] = codes32(a[i], m[i], e[i]);
    _mm256_storeu_si256((__m256i *)pk, pack4(c[0], c[1]));
    _mm256_storeu_si256((__m256i *)(pk + 32), pack4(c[2], c[3]));
}

/* Whole blocks are taken a few at a time in two phases, every scale then
 * every code, as the bf16 kernel takes its chunks: a scale is a long chain
 * (maxima, a gather, a division, the E4M3 rounding) that the compares would
 * otherwise wait on. The input is asked for a page ahead, as there. */
#define CHUNK_BLOCKS 3
#define PREFETCH_AHEAD 4096

static T2 INL void chunk_blocks(const uint8_t *p, unsigned nb, const nvfp4_code_block *blk, nvfp4_thr_table *tt,
                                block_cache *bc, uint8_t *pk, uint8_t *sc, uint64_t *nan)
{
    int32_t key[CHUNK_BLOCKS * GROUPS_PER_BLOCK] __attribute__((aligned(32)));
    for (unsigned b = 0; b < nb; b++) {
        const uint8_t *q = p + b * NVFP4_CODE_BLOCK;
        _mm_prefetch((const char *)((uintptr_t)q + PREFETCH_AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)((uintptr_t)q + PREFETCH_AHEAD + 64), _MM_HINT_T0);
        block_scales(q, &blk[b], &bc[b], key + b * GROUPS_PER_BLOCK, sc + b * GROUPS_PER_BLOCK, nan);
    }
    for (unsigned b = 0; b < nb; b++)
        block_codes(p + b * NVFP4_CODE_BLOCK, &blk[b], tt, &bc[b], key + b * GROUPS_PER_BLOCK,
                    pk + b * NVFP4_CODE_BLOCK / 2);
}

/* A block's tables for one call's rows: no edges built yet, its scale table. */
static T2 INL void block_ready(const nvfp4_code_block *blk, __m256 gsv, block_cache *bc)
{
    memset(bc->e, UNBUILT, sizeof bc->e);
    block_scale_table(blk, gsv, bc->scale);
}

/* A width's rows (code_rows_256, code_rows_512), CHUNK taking whole blocks
 * a few at a time and READY readying each block's tables: a macro, as a
 * function of the AVX2 target cannot inline the AVX-512 pieces (the bf16
 * kernel's rows in nvfp4_simd.c are made the same way). A block narrower
 * than 128 columns (the row's last) goes through SHORT, a copy padded with
 * code 0 whose groups' output is dropped, out of line so the row loop
 * holds one copy of CHUNK. */
#define DEFINE_CODE_ROWS(ROWS, SHORT, TARGET, CHUNK, READY)                                                        \
    static TARGET void SHORT(const uint8_t *p, unsigned ng, const nvfp4_code_block *blk, nvfp4_thr_table *tt,     \
                             block_cache *bc, uint8_t *pk, uint8_t *sc, uint64_t *nan)                             \
    {                                                                                                              \
        uint8_t in[NVFP4_CODE_BLOCK] = {0}, packed[NVFP4_CODE_BLOCK / 2], scales[GROUPS_PER_BLOCK];                \
        memcpy(in, p, ng * NVFP4_GROUP);                                                                           \
        CHUNK(in, 1, blk, tt, bc, packed, scales, nan);                                                            \
        memcpy(pk, packed, ng * NVFP4_GROUP / 2);                                                                  \
        memcpy(sc, scales, ng);                                                                                    \
    }                                                                                                              \
                                                                                                                   \
    static TARGET int ROWS(const uint8_t *codes, uint64_t cols, uint64_t nrows, const nvfp4_code_block *blocks,   \
                           float gs, block_cache *bc, uint8_t *packed, uint8_t *scales)                           \
    {                                                                                                              \
        uint64_t groups = cols / NVFP4_GROUP, whole = cols / NVFP4_CODE_BLOCK;                                     \
        __m256 gsv = _mm256_set1_ps(gs);                                                                           \
        uint64_t nan = 0;                                                                                          \
        nvfp4_thr_table tt;                                                                                        \
        nvfp4_thr_init(&tt, gs);                                                                                   \
        for (uint64_t b = 0; b < (cols + NVFP4_CODE_BLOCK - 1) / NVFP4_CODE_BLOCK; b++)                            \
            READY(&blocks[b], gsv, &bc[b]);                                                                        \
        for (uint64_t r = 0; r < nrows; r++) {                                                                     \
            const uint8_t *row = codes + r * cols;                                                                 \
            uint8_t *pk = packed + r * (cols / 2), *sc = scales + r * groups;                                      \
            for (uint64_t b = 0; b < whole; b += CHUNK_BLOCKS) {                                                   \
                unsigned nb = whole - b < CHUNK_BLOCKS ? (unsigned)(whole - b) : CHUNK_BLOCKS;                     \
                CHUNK(row + b * NVFP4_CODE_BLOCK, nb, &blocks[b], &tt, &bc[b], pk + b * NVFP4_CODE_BLOCK / 2,      \
                      sc + b * GROUPS_PER_BLOCK, &nan);                                                            \
            }                                                                                                      \
            uint64_t g0 = whole * GROUPS_PER_BLOCK;                                                                \
            if (g0 < groups)                                                                                       \
                SHORT(row + g0 * NVFP4_GROUP, (unsigned)(groups - g0), &blocks[whole], &tt, &bc[whole],            \
                      pk + g0 * 8, sc + g0, &nan);                                                                 \
        }                                                                                                          \
        return nan != 0;                                                                                           \
    }

DEFINE_CODE_ROWS(code_rows_256, short_block, T2, chunk_blocks, block_ready)

/* ---- AVX-512 (BW, VBMI): a block's eight groups in two registers --------
 * The same decisions with a block in two 64-byte registers: the eight
 * largest codes looked up in the block's scale table by one byte permute,
 * the eight groups' edges fetched together, every per-byte choice a mask.
 * An edge table entry not yet built holds 0x80 in every byte, a value no
 * edge takes (-1..126), so the fetched edges themselves say when to carry. */
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")))

/* Byte g of the result (g < 8) is the largest magnitude of group g; m0
 * holds groups 0-3, m1 groups 4-7, one a 128-bit lane. */
static T5 INL __m512i group_max8_512(__m512i m0, __m512i m1)
{
    __m512i t = _mm512_max_epu8(_mm512_unpacklo_epi8(m0, m1), _mm512_unpackhi_epi8(m0, m1));
    t = _mm512_max_epu8(t, _mm512_bsrli_epi128(t, 8));
    t = _mm512_max_epu8(t, _mm512_bsrli_epi128(t, 4));
    t = _mm512_max_epu8(t, _mm512_bsrli_epi128(t, 2));
    /* lane L's bytes 0 and 1 now hold groups L and L + 4 */
    const __m512i order = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0x3121110130201000);
    return _mm512_permutexvar_epi8(order, t);
}

/* Four groups' codes (bytes a, magnitudes m; their edges e, one group a
 * lane, in its low 8 bytes), as codes32's search with masks. */
static T5 INL __m512i codes64(__m512i a, __m512i m, __m512i e)
{
    __m512i four = _mm512_maskz_mov_epi8(_mm512_cmpgt_epi8_mask(m, _mm512_shuffle_epi8(e, _mm512_set1_epi8(3))),
                                         _mm512_set1_epi8(4));
    __mmask64 k2 = _mm512_cmpgt_epi8_mask(m, _mm512_shuffle_epi8(e, _mm512_or_si512(four, _mm512_set1_epi8(1))));
    __m512i upper = _mm512_mask_add_epi8(four, k2, four, _mm512_set1_epi8(2));
    __mmask64 k1 = _mm512_cmpgt_epi8_mask(m, _mm512_shuffle_epi8(e, upper));
    __m512i below = _mm512_mask_add_epi8(upper, k1, upper, _mm512_set1_epi8(1));
    __mmask64 neg_nonzero =
        _mm512_mask_cmpgt_epi8_mask(_mm512_movepi8_mask(a), m, _mm512_shuffle_epi8(e, _mm512_set1_epi8(7)));
    return _mm512_mask_add_epi8(below, neg_nonzero, below, _mm512_set1_epi8(8));
}

/* The 64 bytes of edges of the eight groups whose scale codes are the low
 * 8 bytes of sc: eight loads (a gather took a quarter of the kernel's time
 * on Zen 5). */
static T5 INL __m512i gather_edges(const block_cache *bc, __m128i sc)
{
    uint64_t keys = (uint64_t)_mm_cvtsi128_si64(sc);
    __m128i e[GROUPS_PER_BLOCK / 2];
#pragma GCC unroll 4
    for (int i = 0; i < GROUPS_PER_BLOCK / 2; i++)
        e[i] = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)&bc->e[keys >> 16 * i & 0x7f]),
                                  _mm_loadl_epi64((const __m128i *)&bc->e[keys >> (16 * i + 8) & 0x7f]));
    __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(e[0]), e[1], 1);
    __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(e[2]), e[3], 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* carry_edges's tables for the n keys, each edge found by counting the
 * codes at or below it (mag being sorted, the count is the last such code
 * plus one): four compares of the block's 127 magnitudes an edge. */
__attribute__((cold, noinline)) static T5 void carry_edges_512(nvfp4_thr_table *tt, block_cache *bc,
                                                               const int32_t *keys, unsigned n)
{
    nvfp4_thr_build_codes(tt, keys, n);
    __m512i mag[4];
    for (int i = 0; i < 4; i++)
        mag[i] = _mm512_loadu_si512(bc->mag16 + 32 * i);
    for (unsigned g = 0; g < n; g++) {
        unsigned key = (unsigned)keys[g];
        if (edges_built(bc, key))
            continue;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i edge = _mm512_set1_epi16((short)(tt->code[key].edge[k] & 0xffff));
            int count = __builtin_popcount(_mm512_cmple_epu16_mask(mag[0], edge)) +
                        __builtin_popcount(_mm512_cmple_epu16_mask(mag[1], edge)) +
                        __builtin_popcount(_mm512_cmple_epu16_mask(mag[2], edge)) +
                        __builtin_popcount(_mm512_mask_cmple_epu16_mask(0x7fffffffu, mag[3], edge));   /* not 127 */
            bc->e[key].c[k] = (int8_t)(count - 1);
        }
    }
}

/* Phase one for a block: its scale bytes to sc and its groups' edges, the
 * edges carried first where a scale code is new to the block. */
static T5 INL __m512i block_scales_512(const uint8_t *p, const nvfp4_code_block *blk, nvfp4_thr_table *tt,
                                       block_cache *bc, uint8_t *sc, uint64_t *nan)
{
    __m512i m0 = _mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(0x7f));
    __m512i m1 = _mm512_and_si512(_mm512_loadu_si512(p + 64), _mm512_set1_epi8(0x7f));
    __m512i top = group_max8_512(m0, m1);
    *nan |= _mm512_mask_cmpeq_epi8_mask(0xff, top, _mm512_set1_epi8(NAN_MAG));
    __m128i code = _mm512_castsi512_si128(
        _mm512_permutex2var_epi8(_mm512_loadu_si512(bc->scale), top, _mm512_loadu_si512(bc->scale + 64)));
    _mm_storel_epi64((__m128i *)sc, code);
    __m512i e = gather_edges(bc, code);
    if (__builtin_expect(_mm512_cmpeq_epi8_mask(e, _mm512_set1_epi8((char)UNBUILT)) != 0, 0)) {
        int32_t key[GROUPS_PER_BLOCK];
        _mm256_storeu_si256((__m256i *)key, _mm256_cvtepu8_epi32(_mm_and_si128(code, _mm_set1_epi8(0x7f))));
        carry_edges_512(tt, bc, key, GROUPS_PER_BLOCK);
        e = gather_edges(bc, code);
    }
    return e;
}

/* Phase two: the block's 64 packed bytes from its codes and edges. */
static T5 INL void block_codes_512(const uint8_t *p, uint8_t flip, __m512i e, uint8_t *pk)
{
    const __m512i nib = _mm512_set1_epi16(0x1001);
    __m512i a0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi8((char)flip));
    __m512i a1 = _mm512_xor_si512(_mm512_loadu_si512(p + 64), _mm512_set1_epi8((char)flip));
    __m512i m0 = _mm512_and_si512(a0, _mm512_set1_epi8(0x7f)), m1 = _mm512_and_si512(a1, _mm512_set1_epi8(0x7f));
    __m512i c0 = codes64(a0, m0, _mm512_permutexvar_epi64(_mm512_set_epi64(3, 3, 2, 2, 1, 1, 0, 0), e));
    __m512i c1 = codes64(a1, m1, _mm512_permutexvar_epi64(_mm512_set_epi64(7, 7, 6, 6, 5, 5, 4, 4), e));
    /* lane L: group L's 8 bytes, then group L + 4's */
    __m512i packed = _mm512_packus_epi16(_mm512_maddubs_epi16(c0, nib), _mm512_maddubs_epi16(c1, nib));
    _mm512_storeu_si512(pk, _mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), packed));
}

static T5 INL void chunk_blocks_512(const uint8_t *p, unsigned nb, const nvfp4_code_block *blk,
                                    nvfp4_thr_table *tt, block_cache *bc, uint8_t *pk, uint8_t *sc,
                                    uint64_t *nan)
{
    __m512i e[CHUNK_BLOCKS];
    for (unsigned b = 0; b < nb; b++) {
        const uint8_t *q = p + b * NVFP4_CODE_BLOCK;
        _mm_prefetch((const char *)((uintptr_t)q + PREFETCH_AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)((uintptr_t)q + PREFETCH_AHEAD + 64), _MM_HINT_T0);
        e[b] = block_scales_512(q, &blk[b], tt, &bc[b], sc + b * GROUPS_PER_BLOCK, nan);
    }
    for (unsigned b = 0; b < nb; b++)
        block_codes_512(p + b * NVFP4_CODE_BLOCK, blk[b].flip, e[b], pk + b * NVFP4_CODE_BLOCK / 2);
}

/* block_ready, and the magnitudes' top halves for carry_edges_512 */
static T5 INL void block_ready_512(const nvfp4_code_block *blk, __m256 gsv, block_cache *bc)
{
    block_ready(blk, gsv, bc);
    for (int c = 0; c < 128; c += 16)
        _mm256_storeu_si256((__m256i *)(bc->mag16 + c),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_loadu_si512(blk->mag + c), 16)));
}

DEFINE_CODE_ROWS(code_rows_512, short_block_512, T5, chunk_blocks_512, block_ready_512)

static int cpu_512_ok(void)
{
    __builtin_cpu_init();
    return nvfp4_cpu_avx512_ok() && __builtin_cpu_supports("avx512vbmi");
}

int nvfp4_code_rows_ok(void)
{
    return nvfp4_cpu_avx2_ok();
}

int nvfp4_code_rows_width_ok(int width)
{
    return width == 256 ? nvfp4_cpu_avx2_ok() : width == 512 && cpu_512_ok();
}

int nvfp4_code_rows_width_for(nvfp4_rows_fn k)
{
    return k == nvfp4_quantize_rows_avx512 && cpu_512_ok() ? 512 : 256;
}

int nvfp4_quantize_code_rows_width(int width, const uint8_t *codes, uint64_t cols, uint64_t nrows,
                                   const nvfp4_code_block *blocks, float gs, void *work, uint8_t *packed,
                                   uint8_t *scales)
{
    if (width == 512)
        return code_rows_512(codes, cols, nrows, blocks, gs, work, packed, scales);
    return code_rows_256(codes, cols, nrows, blocks, gs, work, packed, scales);
}

int nvfp4_quantize_code_rows(const uint8_t *codes, uint64_t cols, uint64_t nrows, const nvfp4_code_block *blocks,
                             float gs, void *work, uint8_t *packed, uint8_t *scales)
{
    return nvfp4_quantize_code_rows_width(cpu_512_ok() ? 512 : 256, codes, cols, nrows, blocks, gs, work, packed,
                                          scales);
}
#else
int nvfp4_code_rows_ok(void)
{
    return 0;
}

int nvfp4_quantize_code_rows(const uint8_t *codes, uint64_t cols, uint64_t nrows, const nvfp4_code_block *blocks,
                             float gs, void *work, uint8_t *packed, uint8_t *scales)
{
    (void)codes, (void)cols, (void)nrows, (void)blocks, (void)gs, (void)work, (void)packed, (void)scales;
    return 1;
}

int nvfp4_code_rows_width_ok(int width)
{
    (void)width;
    return 0;
}

int nvfp4_code_rows_width_for(nvfp4_rows_fn k)
{
    (void)k;
    return 256;
}

int nvfp4_quantize_code_rows_width(int width, const uint8_t *codes, uint64_t cols, uint64_t nrows,
                                   const nvfp4_code_block *blocks, float gs, void *work, uint8_t *packed,
                                   uint8_t *scales)
{
    (void)width;
    return nvfp4_quantize_code_rows(codes, cols, nrows, blocks, gs, work, packed, scales);
}
#endif

size_t nvfp4_code_rows_work(uint64_t cols)
{
#if defined(__x86_64__)
    return (size_t)((cols + NVFP4_CODE_BLOCK - 1) / NVFP4_CODE_BLOCK) * sizeof(block_cache);
#else
    (void)cols;
    return 1;
#endif
}

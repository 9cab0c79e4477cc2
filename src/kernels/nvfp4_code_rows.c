/* The code-space NVFP4 kernel (nvfp4_code_rows.h), AVX2. It repeats the
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
#define GROUPS_PER_BLOCK (NVFP4_CODE_BLOCK / NVFP4_GROUP)

/* One block's edges in code space for each scale code met so far: c[k] is
 * the last code whose magnitude is at or below edge k (-1: none), so an
 * element's bucket counts the c[k] its code passes, as int8 compares. */
typedef struct code_edges {
    int8_t c[8];
} code_edges;

typedef struct block_cache {
    code_edges e[128];
    uint8_t built[128];
    /* the scale code of a group whose largest magnitude code is c: a
     * function of the block and c alone, so found once per block for all
     * 128 instead of once per group */
    uint8_t scale[128];
} block_cache;

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
        if (bc->built[key])
            continue;
        for (int k = 0; k < 8; k++)
            bc->e[key].c[k] = (int8_t)last_at_or_below(blk, (uint32_t)tt->code[key].edge[k] & 0xffffu);
        bc->built[key] = 1;
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

/* Two groups' codes (their bytes a, magnitudes m) against their edges. */
static T2 INL __m256i codes32(__m256i a, __m256i m, const code_edges *lo, const code_edges *hi)
{
    __m256i e = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)lo)),
                                        _mm_loadl_epi64((const __m128i *)hi), 1);
    __m256i below = _mm256_setzero_si256();
#pragma GCC unroll 7
    for (int k = 0; k < 7; k++)
        below = _mm256_sub_epi8(below, _mm256_cmpgt_epi8(m, _mm256_shuffle_epi8(e, _mm256_set1_epi8((char)k))));
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
                                uint8_t *sc, unsigned *nan)
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
    unsigned missing = 0;
    for (int g = 0; g < GROUPS_PER_BLOCK; g++)
        missing |= bc->built[key[g]] ^ 1u;
    if (__builtin_expect(missing, 0))
        carry_edges(blk, tt, bc, key, GROUPS_PER_BLOCK);
    __m256i a[4], m[4], c[4];
    load_block(p, _mm256_set1_epi8((char)blk->flip), a, m);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        c[i] = codes32(a[i], m[i], &bc->e[key[2 * i]], &bc->e[key[2 * i + 1]]);
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
                                block_cache *bc, uint8_t *pk, uint8_t *sc, unsigned *nan)
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

/* A block narrower than 128 columns (the row's last) through a copy padded
 * with code 0, whose groups' output is dropped. */
static T2 void short_block(const uint8_t *p, unsigned ng, const nvfp4_code_block *blk, nvfp4_thr_table *tt,
                           block_cache *bc, uint8_t *pk, uint8_t *sc, unsigned *nan)
{
    uint8_t in[NVFP4_CODE_BLOCK] = {0}, packed[NVFP4_CODE_BLOCK / 2], scales[GROUPS_PER_BLOCK];
    memcpy(in, p, ng * NVFP4_GROUP);
    chunk_blocks(in, 1, blk, tt, bc, packed, scales, nan);
    memcpy(pk, packed, ng * NVFP4_GROUP / 2);
    memcpy(sc, scales, ng);
}

static T2 int code_rows_256(const uint8_t *codes, uint64_t cols, uint64_t nrows, const nvfp4_code_block *blocks,
                            float gs, block_cache *bc, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP, whole = cols / NVFP4_CODE_BLOCK;
    __m256 gsv = _mm256_set1_ps(gs);
    unsigned nan = 0;
    nvfp4_thr_table tt;
    nvfp4_thr_init(&tt, gs);
    for (uint64_t b = 0; b < (cols + NVFP4_CODE_BLOCK - 1) / NVFP4_CODE_BLOCK; b++) {
        memset(bc[b].built, 0, sizeof bc[b].built);
        block_scale_table(&blocks[b], gsv, bc[b].scale);
    }
    for (uint64_t r = 0; r < nrows; r++) {
        const uint8_t *row = codes + r * cols;
        uint8_t *pk = packed + r * (cols / 2), *sc = scales + r * groups;
        for (uint64_t b = 0; b < whole; b += CHUNK_BLOCKS) {
            unsigned nb = whole - b < CHUNK_BLOCKS ? (unsigned)(whole - b) : CHUNK_BLOCKS;
            chunk_blocks(row + b * NVFP4_CODE_BLOCK, nb, &blocks[b], &tt, &bc[b], pk + b * NVFP4_CODE_BLOCK / 2,
                         sc + b * GROUPS_PER_BLOCK, &nan);
        }
        uint64_t g0 = whole * GROUPS_PER_BLOCK;
        if (g0 < groups)
            short_block(row + g0 * NVFP4_GROUP, (unsigned)(groups - g0), &blocks[whole], &tt, &bc[whole],
                        pk + g0 * 8, sc + g0, &nan);
    }
    return nan != 0;
}

int nvfp4_code_rows_ok(void)
{
    return nvfp4_cpu_avx2_ok();
}

int nvfp4_quantize_code_rows(const uint8_t *codes, uint64_t cols, uint64_t nrows, const nvfp4_code_block *blocks,
                             float gs, void *work, uint8_t *packed, uint8_t *scales)
{
    return code_rows_256(codes, cols, nrows, blocks, gs, work, packed, scales);
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

/* AVX-512 and AVX2 row decoders for the vendor-quantized sources, compiled
 * with target attributes (no -march flag) so one binary runs anywhere and
 * qs_decoders_best picks what the CPU has. Each gives the scalar decoder's
 * bytes exactly, not merely close:
 *   FP8   (b & 0x7f) << 7 with b's sign on bit 15 is an f16 whose value is
 *         the e4m3 value times 2^-8, normals and subnormals alike, so
 *         vcvtph2ps then * 256 (exact) is the scalar table's f32; times the
 *         block's f32 scale (one IEEE multiply, the scalar's), RNE to bf16
 *         on the bits as ff_f32_to_bf16. Bytes 0x7f/0xff are the scalar
 *         table's NaN, whose product is that NaN whatever the scale (the
 *         scalar multiply takes the table value as its first operand, and
 *         x86 returns the first of two NaNs): 0x7fc0, set by mask.
 *   INT4  each group's 16 values (q - 8) * s computed as the scalar table
 *         is (f32 multiply, through f16 by vcvtps2ph/vcvtph2ps for F16
 *         scales, NaN made sign | 0x7fc0 as the scalar f16 round trip
 *         makes it), then looked up per nibble (vpermw; AVX2: vpshufb on
 *         the low and high bytes).
 *   MXFP4 the scalar's own group tables for all 256 exponents, built once
 *         (mxfp4_group_table), looked up the same way. */
#include "qsource_simd.h"

#include <pthread.h>
#include <string.h>

#include "ct_int.h"
#include "fp8_block.h"
#include "mxfp4.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "nvfp4_simd.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INL __attribute__((always_inline)) inline

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define BF16_NAN_E4M3 0x7fc0   /* ff_f32_to_bf16(NAN * s) for any s */

static const float k_int4_q[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

/* MXFP4: each exponent's 16 bf16 values, and the same split into low and
 * high bytes for vpshufb. */
static uint16_t mx_tab[256][16];
static uint8_t mx_split[256][32];
static pthread_once_t mx_once = PTHREAD_ONCE_INIT;

static void mx_init(void)
{
    for (int e = 0; e < 256; e++) {
        mxfp4_group_table((uint8_t)e, mx_tab[e]);
        for (int k = 0; k < 16; k++) {
            mx_split[e][k] = (uint8_t)(mx_tab[e][k] & 0xff);
            mx_split[e][16 + k] = (uint8_t)(mx_tab[e][k] >> 8);
        }
    }
}

/* ---------------------------------------------------------------- AVX-512 */

/* ff_f32_to_bf16 on 16 lanes: RNE on the bits, NaN quieted with its payload. */
static T5 INL __m256i bf16_512(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

/* 16 e4m3 bytes times s, as bf16. */
static T5 INL __m256i fp8_16_512(__m128i b, __m512 s)
{
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16((short)0xbf80));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    return _mm256_mask_mov_epi16(bf16_512(_mm512_mul_ps(v, s)), nan, _mm256_set1_epi16(BF16_NAN_E4M3));
}

/* The 256 values of one block's scale, as fp8_16_512 gives them: eight
 * registers of 32 bf16, indexed by the byte. */
static T5 INL void fp8_table_512(__m512 s, __m512i t[8])
{
    for (int i = 0; i < 8; i++) {
        __m128i b0 = _mm_add_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                  _mm_set1_epi8((char)(32 * i)));
        __m128i b1 = _mm_add_epi8(b0, _mm_set1_epi8(16));
        t[i] = _mm512_inserti64x4(_mm512_castsi256_si512(fp8_16_512(b0, s)), fp8_16_512(b1, s), 1);
    }
}

/* 32 bytes looked up in the block's table: bits 0-5 pick within a pair of
 * registers (vpermi2w), bits 6 and 7 the pair. */
static T5 INL __m512i fp8_lookup32_512(__m256i b, const __m512i t[8])
{
    __m512i idx = _mm512_cvtepu8_epi16(b);
    __m512i q0 = _mm512_permutex2var_epi16(t[0], idx, t[1]), q1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);
    __m512i q2 = _mm512_permutex2var_epi16(t[4], idx, t[5]), q3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);
    __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    return _mm512_mask_mov_epi16(_mm512_mask_mov_epi16(q0, b6, q1), b7, _mm512_mask_mov_epi16(q2, b6, q3));
}

static T5 INL void fp8_block_512(const uint8_t *p, uint64_t len, const __m512i t[8], uint16_t *o)
{
    uint64_t c = 0;
    for (; c + 32 <= len; c += 32)
        _mm512_storeu_si512(o + c, fp8_lookup32_512(_mm256_loadu_si256((const __m256i *)(p + c)), t));
    if (c < len) {
        __mmask32 m = (__mmask32)((1ull << (len - c)) - 1);
        _mm512_mask_storeu_epi16(o + c, m, fp8_lookup32_512(_mm256_maskz_loadu_epi8(m, p + c), t));
    }
}

/* Tables of up to this many blocks are built at once (32 KB on the stack). */
#define FP8_TABLE_BLOCKS 64

/* A block's 256 values are computed once for all the rows that share its
 * scale (a 128-row task: once per 16,384 elements), then each byte is a
 * lookup. Computing every element (two conversions, a multiply, the
 * rounding, the NaN mask) ran at ~1.1 G elements/s a core on Zen 4, most
 * of a Kimi-K2 FP8 job's user time. Rows are still read whole, one after
 * the other: block by block down the rows instead (each table kept in
 * registers) made 64 strided streams that the prefetchers lose. */
static T5 void fp8_rows_512(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                            uint16_t *out)
{
    uint64_t sc = (K + FP8B_BLOCK - 1) / FP8B_BLOCK;
    __m512i tab[FP8_TABLE_BLOCKS][8];
    (void)N;
    for (uint64_t r = 0; r < n;) {
        uint64_t srow = (r0 + r) / FP8B_BLOCK, end = (srow + 1) * FP8B_BLOCK - r0;
        end = end < n ? end : n;
        for (uint64_t b0 = 0; b0 < sc; b0 += FP8_TABLE_BLOCKS) {
            uint64_t nb = sc - b0 < FP8_TABLE_BLOCKS ? sc - b0 : FP8_TABLE_BLOCKS;
            uint64_t c0 = b0 * FP8B_BLOCK, c1 = (b0 + nb) * FP8B_BLOCK < K ? (b0 + nb) * FP8B_BLOCK : K;
            for (uint64_t b = 0; b < nb; b++)
                fp8_table_512(_mm512_set1_ps(s[srow * sc + b0 + b]), tab[b]);
            for (uint64_t i = r; i < end; i++)
                for (uint64_t c = c0; c < c1; c += FP8B_BLOCK)
                    fp8_block_512(w + (r0 + i) * K + c, c1 - c < FP8B_BLOCK ? c1 - c : FP8B_BLOCK,
                                  tab[(c - c0) / FP8B_BLOCK], out + i * K + c);
        }
        r = end;
    }
}

/* 32 nibbles (16 bytes, low nibble first) looked up in tab's 16 words. */
static T5 INL __m512i lookup32_512(__m128i b, __m512i tab)
{
    __m512i d = _mm512_cvtepu8_epi32(b);
    /* dword j: byte j's low nibble in its low word, high nibble in its high */
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0x000f000f), d, _mm512_slli_epi32(d, 12), 0xe0);
    return _mm512_permutexvar_epi16(idx, tab);
}

/* One group of g values (a multiple of 8) from its packed bytes p. */
static T5 INL void group_512(const uint8_t *p, uint64_t g, __m512i tab, uint16_t *o)
{
    uint64_t i = 0;
    for (; i + 32 <= g; i += 32)
        _mm512_storeu_si512(o + i, lookup32_512(_mm_loadu_si128((const __m128i *)(p + i / 2)), tab));
    if (i < g) {
        uint64_t left = g - i;
        __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << (left / 2)) - 1), p + i / 2);
        _mm512_mask_storeu_epi16(o + i, (__mmask32)((1u << left) - 1), lookup32_512(b, tab));
    }
}

/* The scalar group_table of ct_int.c on 16 lanes. */
static T5 INL __m512i int4_table_512(float s, ff_dtype sd)
{
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(k_int4_q), _mm512_set1_ps(s));
    if (sd == FF_DT_F16) {
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        __m512i quiet = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)),
                                        _mm512_set1_epi32(0x7fc00000));
        v = _mm512_mask_mov_ps(_mm512_cvtph_ps(_mm512_cvtps_ph(v, RNE)), nan, _mm512_castsi512_ps(quiet));
    }
    return _mm512_castsi256_si512(bf16_512(v));
}

static T5 void ctint_rows_512(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t K,
                              uint64_t group, uint64_t r0, uint64_t n, uint16_t *out)
{
    uint64_t wbytes = ctint_row_words(K) * 4, ng = K / group, sbytes = ng * ff_dtype_size(sd);
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *p = packed + (r0 + r) * wbytes, *s = scales + (r0 + r) * sbytes;
        for (uint64_t g = 0; g < ng; g++)
            group_512(p + g * group / 2, group, int4_table_512(ff_load_f32(s, sd, g), sd), out + r * K + g * group);
    }
}

static T5 void mxfp4_rows_512(const uint8_t *packed, const uint8_t *scales, uint64_t K, uint64_t r0, uint64_t n,
                              uint16_t *out)
{
    pthread_once(&mx_once, mx_init);
    uint64_t ng = K / MXFP4_GROUP;
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *p = packed + (r0 + r) * (K / 2), *s = scales + (r0 + r) * ng;
        uint16_t *o = out + r * K;
        for (uint64_t g = 0; g < ng; g++) {
            __m512i tab = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)mx_tab[s[g]]));
            _mm512_storeu_si512(o + g * MXFP4_GROUP,
                                lookup32_512(_mm_loadu_si128((const __m128i *)(p + g * MXFP4_GROUP / 2)), tab));
        }
    }
}

/* ------------------------------------------------------------------- AVX2 */

/* ff_f32_to_bf16 on 8 lanes, left in the low half of each 32-bit lane. */
static T2 INL __m256i bf16_256(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

/* Two bf16_256 results as 16 words in order. */
static T2 INL __m256i pack_256(__m256i a, __m256i b)
{
    /* packus works per 128-bit lane (values fit: no saturation) */
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
}

/* 16 e4m3 bytes times s, as bf16. */
static T2 INL __m256i fp8_16_256(__m128i b, __m256 s)
{
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16((short)0xbf80));
    __m256 k = _mm256_set1_ps(256.0f);
    __m256 v0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k);
    __m256 v1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k);
    __m256i r = pack_256(bf16_256(_mm256_mul_ps(v0, s)), bf16_256(_mm256_mul_ps(v1, s)));
    __m128i nan = _mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    return _mm256_blendv_epi8(r, _mm256_set1_epi16(BF16_NAN_E4M3), _mm256_cvtepi8_epi16(nan));
}

static T2 void fp8_row_256(const uint8_t *row, const float *srow, uint64_t K, uint16_t *o)
{
    uint64_t c = 0;
    for (; c + 16 <= K; c += 16) {
        __m256i r = fp8_16_256(_mm_loadu_si128((const __m128i *)(row + c)), _mm256_set1_ps(srow[c / FP8B_BLOCK]));
        _mm256_storeu_si256((__m256i *)(o + c), r);
    }
    if (c < K) {
        uint8_t b[16] = {0};
        uint16_t r[16];
        memcpy(b, row + c, K - c);
        _mm256_storeu_si256((__m256i *)r, fp8_16_256(_mm_loadu_si128((const __m128i *)b),
                                                     _mm256_set1_ps(srow[c / FP8B_BLOCK])));
        memcpy(o + c, r, (K - c) * 2);
    }
}

static T2 void fp8_rows_256(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                            uint16_t *out)
{
    uint64_t sc = (K + FP8B_BLOCK - 1) / FP8B_BLOCK;
    (void)N;
    for (uint64_t r = 0; r < n; r++)
        fp8_row_256(w + (r0 + r) * K, s + ((r0 + r) / FP8B_BLOCK) * sc, K, out + r * K);
}

/* A 16-word table as vpshufb wants it: low bytes in lo, high bytes in hi,
 * each repeated in both 128-bit lanes. */
typedef struct tab_256 {
    __m256i lo, hi;
} tab_256;

static T2 INL tab_256 split_256(__m256i words)
{
    const __m256i even_odd = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                              0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    /* qwords: lo 0-7, hi 0-7, lo 8-15, hi 8-15 -> lo 0-15, hi 0-15 */
    __m256i t = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, even_odd), 0xd8);
    return (tab_256){_mm256_permute2x128_si256(t, t, 0x00), _mm256_permute2x128_si256(t, t, 0x11)};
}

/* 32 nibbles (16 bytes, low nibble first) looked up: values 0-15 in *a,
 * 16-31 in *b. */
static T2 INL void lookup32_256(__m128i b, tab_256 t, __m256i *a, __m256i *c)
{
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
    __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    __m256i l = _mm256_shuffle_epi8(t.lo, idx), h = _mm256_shuffle_epi8(t.hi, idx);
    __m256i w0 = _mm256_unpacklo_epi8(l, h), w1 = _mm256_unpackhi_epi8(l, h);
    *a = _mm256_permute2x128_si256(w0, w1, 0x20);
    *c = _mm256_permute2x128_si256(w0, w1, 0x31);
}

static T2 INL void group_256(const uint8_t *p, uint64_t g, tab_256 t, uint16_t *o)
{
    __m256i a, b;
    uint64_t i = 0;
    for (; i + 32 <= g; i += 32) {
        lookup32_256(_mm_loadu_si128((const __m128i *)(p + i / 2)), t, &a, &b);
        _mm256_storeu_si256((__m256i *)(o + i), a);
        _mm256_storeu_si256((__m256i *)(o + i + 16), b);
    }
    if (i < g) {
        uint8_t in[16] = {0};
        uint16_t r[32];
        memcpy(in, p + i / 2, (g - i) / 2);
        lookup32_256(_mm_loadu_si128((const __m128i *)in), t, &a, &b);
        _mm256_storeu_si256((__m256i *)r, a);
        _mm256_storeu_si256((__m256i *)(r + 16), b);
        memcpy(o + i, r, (g - i) * 2);
    }
}

/* The scalar group_table of ct_int.c on 2 x 8 lanes. */
static T2 INL __m256 int4_values_256(__m256 v, ff_dtype sd)
{
    if (sd != FF_DT_F16)
        return v;
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    __m256i quiet = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32((int)0x80000000u)),
                                    _mm256_set1_epi32(0x7fc00000));
    return _mm256_blendv_ps(_mm256_cvtph_ps(_mm256_cvtps_ph(v, RNE)), _mm256_castsi256_ps(quiet), nan);
}

static T2 INL tab_256 int4_table_256(float s, ff_dtype sd)
{
    __m256 sv = _mm256_set1_ps(s);
    __m256 v0 = int4_values_256(_mm256_mul_ps(_mm256_loadu_ps(k_int4_q), sv), sd);
    __m256 v1 = int4_values_256(_mm256_mul_ps(_mm256_loadu_ps(k_int4_q + 8), sv), sd);
    return split_256(pack_256(bf16_256(v0), bf16_256(v1)));
}

static T2 void ctint_rows_256(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t K,
                              uint64_t group, uint64_t r0, uint64_t n, uint16_t *out)
{
    uint64_t wbytes = ctint_row_words(K) * 4, ng = K / group, sbytes = ng * ff_dtype_size(sd);
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *p = packed + (r0 + r) * wbytes, *s = scales + (r0 + r) * sbytes;
        for (uint64_t g = 0; g < ng; g++)
            group_256(p + g * group / 2, group, int4_table_256(ff_load_f32(s, sd, g), sd), out + r * K + g * group);
    }
}

static T2 void mxfp4_rows_256(const uint8_t *packed, const uint8_t *scales, uint64_t K, uint64_t r0, uint64_t n,
                              uint16_t *out)
{
    pthread_once(&mx_once, mx_init);
    uint64_t ng = K / MXFP4_GROUP;
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *p = packed + (r0 + r) * (K / 2), *s = scales + (r0 + r) * ng;
        uint16_t *o = out + r * K;
        for (uint64_t g = 0; g < ng; g++) {
            const __m128i *t = (const __m128i *)mx_split[s[g]];
            tab_256 tab = {_mm256_broadcastsi128_si256(_mm_loadu_si128(t)),
                           _mm256_broadcastsi128_si256(_mm_loadu_si128(t + 1))};
            group_256(p + g * MXFP4_GROUP / 2, MXFP4_GROUP, tab, o + g * MXFP4_GROUP);
        }
    }
}
#endif

/* ---------------------------------------------------------------- dispatch */

static const qs_decoders k_scalar = {"scalar", fp8b_decode_rows, ctint_decode_rows, mxfp4_decode_rows};
#if defined(__x86_64__)
static const qs_decoders k_avx2 = {"avx2", fp8_rows_256, ctint_rows_256, mxfp4_rows_256};
static const qs_decoders k_avx512 = {"avx512", fp8_rows_512, ctint_rows_512, mxfp4_rows_512};
#endif

const qs_decoders *qs_decoders_by_name(const char *name)
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

static const qs_decoders *k_best;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void best_init(void)
{
    static const char *const order[] = {"avx512", "avx2"};
    k_best = &k_scalar;
    for (size_t i = 0; i < sizeof order / sizeof *order && k_best == &k_scalar; i++)
        if (qs_decoders_by_name(order[i]))
            k_best = qs_decoders_by_name(order[i]);
}

const qs_decoders *qs_decoders_best(void)
{
    pthread_once(&best_once, best_init);
    return k_best;
}

/* The vendor-source decoders on hand-made words: where each INT4 value sits
 * in its int32 word, the rounding chain of each scale dtype, MXFP4's
 * exponent range and overflow, and the quantization_config refusals. The
 * conformance tier proves the same against compressed-tensors itself
 * (tests/conformance/t_ct_sources.py). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>

#include "ct_int.h"
#include "dtype.h"
#include "fp8_block.h"
#include "mx_exact.h"
#include "mxfp4.h"
#include "qsource.h"
#include "unit.h"

/* Value i of a row is the nibble at bits 4*(i%8) of word i/8, minus 8. */
static void int4_nibble_order(void)
{
    uint32_t words[4];
    for (int w = 0; w < 4; w++)
        words[w] = 0x76543210u + 0x11111111u * (uint32_t)(w & 1);   /* nibbles 0..7, then 1..8 */
    uint16_t scale = ff_f32_to_bf16(1.0f), out[32];
    uint16_t scales[1] = {scale};
    ctint_decode_rows((const uint8_t *)words, (const uint8_t *)scales, FF_DT_BF16, 32, 32, 0, 1, out);
    for (int i = 0; i < 32; i++) {
        int nib = (i % 8) + ((i / 8) & 1);
        CHECK(ff_bf16_to_f32(out[i]) == (float)(nib - 8));
    }
}

/* q * s rounds once to bf16 for a bf16 scale (the f32 product is exact),
 * through f16 for an f16 scale, from the f32 product for an f32 one. */
static void int4_scale_dtypes(void)
{
    uint32_t word = 0xFFFFFFFFu;   /* every value 15 - 8 = 7 */
    uint32_t words[4] = {word, word, word, word};
    uint16_t out[32];
    float s = 1.0078125f;          /* 1 + 2^-7: 7 * s = 7.0546875 needs 10 bits */
    uint16_t bs[1] = {ff_f32_to_bf16(s)};
    ctint_decode_rows((const uint8_t *)words, (const uint8_t *)bs, FF_DT_BF16, 32, 32, 0, 1, out);
    CHECK(out[0] == ff_f32_to_bf16(7.0546875f));
    CHECK(ff_bf16_to_f32(out[0]) == 7.0625f);   /* RNE of 7.0546875 at bf16's 8 bits */

    float fs = 1.0f + 0x1p-20f;    /* f32: 7 * fs is exact in f32, then one bf16 rounding */
    ctint_decode_rows((const uint8_t *)words, (const uint8_t *)&fs, FF_DT_F32, 32, 32, 0, 1, out);
    CHECK(out[5] == ff_f32_to_bf16(7.0f * fs));

    uint16_t hs[1] = {ff_f32_to_f16(1.0f + 0x1p-10f)};   /* 7 * (1 + 2^-10) rounds in f16 first */
    ctint_decode_rows((const uint8_t *)words, (const uint8_t *)hs, FF_DT_F16, 32, 32, 0, 1, out);
    float p16 = ff_f16_to_f32(ff_f32_to_f16(7.0f * ff_f16_to_f32(hs[0])));
    CHECK(out[9] == ff_f32_to_bf16(p16));
}

/* Rows and groups: row r's scales start at r * K / group. */
static void int4_rows_and_groups(void)
{
    enum { K = 64, G = 32 };
    uint32_t words[2 * K / 8];
    for (int i = 0; i < 2 * K / 8; i++)
        words[i] = 0x99999999u;   /* every value 9 - 8 = 1 */
    uint16_t scales[2 * K / G], out[2 * K];
    for (int i = 0; i < 2 * K / G; i++)
        scales[i] = ff_f32_to_bf16((float)(i + 1));
    ctint_decode_rows((const uint8_t *)words, (const uint8_t *)scales, FF_DT_BF16, K, G, 1, 1, out);
    CHECK(ff_bf16_to_f32(out[0]) == 3.0f && ff_bf16_to_f32(out[G]) == 4.0f);
}

/* 2^(e - 127) times the E2M1 value, low nibble first; e = 0 reaches bf16's
 * subnormals exactly, e = 254 overflows code 6 to Inf as the reference. */
static void mxfp4_values(void)
{
    uint8_t packed[16], out_e[1];
    uint16_t out[32];
    for (int i = 0; i < 16; i++)
        packed[i] = (uint8_t)(0x1 | 0xF << 4);   /* low: 0.5, high: -6 */
    out_e[0] = 127;
    mxfp4_decode_rows(packed, out_e, 32, 0, 1, out);
    CHECK(ff_bf16_to_f32(out[0]) == 0.5f && ff_bf16_to_f32(out[1]) == -6.0f);
    out_e[0] = 0;
    mxfp4_decode_rows(packed, out_e, 32, 0, 1, out);
    CHECK(ff_bf16_to_f32(out[0]) == ldexpf(1.0f, -128) && ff_bf16_to_f32(out[1]) == -6.0f * ldexpf(1.0f, -127));
    out_e[0] = 254;
    mxfp4_decode_rows(packed, out_e, 32, 0, 1, out);
    CHECK(ff_bf16_to_f32(out[0]) == ldexpf(1.0f, 126) && isinf(ff_bf16_to_f32(out[1])));
}

static int config_says(const char *qc, qs_format *f, char *why, size_t n)
{
    char text[2048];
    snprintf(text, sizeof text, "{\"quantization_config\": %s}", qc);
    json_t *c = json_loads(text, 0, NULL);
    int r = qs_config(c, f, why, n);
    json_decref(c);
    return r;
}

#define CT(fmt, w) "{\"quant_method\": \"compressed-tensors\", \"format\": \"" fmt "\", \"config_groups\": " \
                   "{\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {" w "}}}}"
#define INT4W "\"num_bits\": 4, \"type\": \"int\", \"symmetric\": true, \"strategy\": \"group\", \"group_size\": 32"

static void configs(void)
{
    qs_format f;
    char why[400];
    CHECK(config_says(CT("pack-quantized", INT4W), &f, why, sizeof why) == 1 && f.kind == QS_CT_INT && f.group == 32);
    CHECK(config_says(CT("mxfp4-pack-quantized", "\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"group\", "
                                                 "\"group_size\": 32"), &f, why, sizeof why) == 1 &&
          f.kind == QS_CT_MXFP4);
    CHECK(config_says(CT("pack-quantized", "\"num_bits\": 8, \"type\": \"int\", \"strategy\": \"group\", "
                                           "\"group_size\": 32"), &f, why, sizeof why) == -1 &&
          strstr(why, "num_bits"));
    CHECK(config_says(CT("pack-quantized", "\"num_bits\": 4, \"type\": \"int\", \"symmetric\": false, \"strategy\": "
                                           "\"group\", \"group_size\": 32"), &f, why, sizeof why) == -1 &&
          strstr(why, "symmetric"));
    CHECK(config_says(CT("pack-quantized", "\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\", "
                                           "\"group_size\": 12"), &f, why, sizeof why) == -1 &&
          strstr(why, "group_size"));
    CHECK(config_says(CT("pack-quantized", INT4W ", \"actorder\": \"group\""), &f, why, sizeof why) == -1 &&
          strstr(why, "actorder"));
    CHECK(config_says(CT("nvfp4-pack-quantized", INT4W), &f, why, sizeof why) == -1 && strstr(why, "already"));
    CHECK(config_says(CT("float-quantized", INT4W), &f, why, sizeof why) == -1 && strstr(why, "float-quantized"));
    CHECK(config_says("{\"quant_method\": \"gptq\"}", &f, why, sizeof why) == -1 && strstr(why, "gptq"));
    CHECK(config_says("null", &f, why, sizeof why) == 0);
    CHECK(config_says("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}", &f, why, sizeof why) == 1 &&
          f.kind == QS_FP8_BLOCK);
}

/* The exact route: the span counts nonzero 16-groups only, k puts the
 * largest exponent at E4M3's 2^8, 17 binades fit and 18 do not, and each
 * 16-group's scale over 2^k is the MXFP4 exponent exactly. */
static void mxfp4_exact(void)
{
    enum { K = 64 };
    uint8_t packed[2 * K / 2] = {0}, e8m0[2 * K / 32] = {120, 137, 100, 130};
    packed[0] = 0x02;            /* row 0, group 0: nonzero (e 120) */
    packed[8] = 0x08;            /* row 0, 16-group 1 (same 32-group): only -0 */
    packed[16] = 0x70;           /* row 0, group 1: e 137 */
    /* row 1: all zero (e 100 and 130 ignored) */
    mx_span sp = {0};
    mx_span_add(&sp, packed, e8m0, 2, K);
    CHECK(sp.any && sp.emin == 120 && sp.emax == 137 && sp.groups == 8);
    int k = 0;
    CHECK(mx_exact_k(&sp, &k) && k == 8 - (137 - 127));
    uint8_t scales[2 * K / 16];
    mx_exact_scales(e8m0, 2, K, k, scales);
    float gs = ldexpf(1.0f, k);
    CHECK(ff_e4m3_to_f32(scales[0]) / gs == ldexpf(1.0f, 120 - 127));
    CHECK(ff_e4m3_to_f32(scales[2]) / gs == ldexpf(1.0f, 137 - 127));
    CHECK(ff_e4m3_to_f32(scales[0]) == ldexpf(1.0f, -9));   /* 17 binades down: E4M3's smallest subnormal */
    mx_span wide = sp;
    wide.emin = 119;             /* 18 binades: not exact */
    CHECK(!mx_exact_k(&wide, &k));
    mx_span none = {0};
    CHECK(mx_exact_k(&none, &k) && k == 0);
}

/* The decoded rows' largest |value|, or 1 when one is NaN or infinite. */
static int decoded_absmax(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                          float *amax)
{
    uint16_t *o = malloc(n * K * 2);
    fp8b_decode_rows(w, s, N, K, r0, n, o);
    float best = 0.0f;
    int bad = 0;
    for (uint64_t i = 0; i < n * K; i++) {
        float f = fabsf(ff_bf16_to_f32(o[i]));
        bad |= !(f <= 3.4028235e38f);
        best = f > best ? f : best;
    }
    free(o);
    *amax = best;
    return bad;
}

static uint32_t lcg(uint32_t *x) { return *x = *x * 1664525u + 1013904223u; }

/* qs_rows_absmax from the codes == the max over the decoded bf16, bit for
 * bit, for scales from subnormal to ones that overflow, of either sign,
 * NaN bytes and NaN or infinite scales (then both say "bad"). */
static void fp8_absmax_from_codes(void)
{
    enum { N = 300, K = 300 };
    static uint8_t w[N * K];
    float s[3 * 3];
    uint32_t x = 7;
    static const float special[] = {1e-40f, -3e-39f, 1.0f, -0.5f, 7.5e35f, 3e38f, INFINITY, NAN, 0.0f};
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof w; i++)
            w[i] = (uint8_t)(lcg(&x) >> 24);
        if (round % 3 == 0)   /* no NaN bytes in most blocks */
            for (size_t i = 0; i < sizeof w; i++)
                w[i] = (w[i] & 0x7f) == 0x7f ? (uint8_t)(w[i] - 1) : w[i];
        for (int i = 0; i < 9; i++)
            s[i] = round % 2 ? special[(lcg(&x) >> 8) % 9] : ldexpf((float)((lcg(&x) >> 8) % 1000) / 999.0f, (int)((lcg(&x) >> 8) % 60) - 40);
        qs_rows r = {.kind = QS_FP8_BLOCK, .data = w, .fp8_scales = s, .rows = N, .cols = K};
        uint64_t r0 = (lcg(&x) >> 8) % N, n = 1 + (lcg(&x) >> 8) % (N - r0);
        float a = -1.0f, b = -1.0f;
        int got = qs_rows_absmax(&r, r0, n, &a), want = decoded_absmax(w, s, N, K, r0, n, &b);
        CHECK_EQ_INT(got, want);
        if (got == 0 && want == 0 && memcmp(&a, &b, sizeof a) != 0) {
            fprintf(stderr, "  round %d rows %llu+%llu: %a from the codes, %a decoded\n", round,
                    (unsigned long long)r0, (unsigned long long)n, a, b);
            CHECK(0);
        }
    }
    qs_rows ct = {.kind = QS_CT_INT};
    float a;
    CHECK_EQ_INT(qs_rows_absmax(&ct, 0, 1, &a), -1);
}

static uint64_t top_block(const float *s)
{
    uint64_t t = 0;
    for (uint64_t i = 1; i < 9; i++)
        t = fabsf(s[i]) > fabsf(s[t]) ? i : t;
    return t;
}

/* qs_rows_top_absmax: when it decides (0), the amax equals the max over the
 * whole decoded weight bit for bit; it decides only when a top-scale block
 * holds 448, and never on NaN or infinite scales. qs_rows_nan finds any
 * NaN byte. Blocks made as DeepSeek makes them (scale = amax / 448), some
 * with 448 taken out of the top block, ties, negative and special scales. */
static void fp8_amax_from_top_blocks(void)
{
    enum { N = 300, K = 260, SR = 3, SC = 3 };
    static uint8_t w[N * K];
    float s[SR * SC];
    uint32_t x = 11;
    static const float special[] = {INFINITY, NAN, 0.0f, -1.0f};
    int decided = 0;
    for (int round = 0; round < 300; round++) {
        for (size_t i = 0; i < sizeof w; i++) {
            w[i] = (uint8_t)(lcg(&x) >> 24);
            w[i] = (w[i] & 0x7f) >= 0x7e ? (uint8_t)(w[i] & 0x80) : w[i];   /* no 448, no NaN yet */
        }
        for (int i = 0; i < SR * SC; i++)
            s[i] = ldexpf((float)(1 + (lcg(&x) >> 8) % 8) / 8.0f, (int)((lcg(&x) >> 8) % 20) - 10);
        if (round % 4 == 1)
            s[(lcg(&x) >> 8) % 9] = -s[(lcg(&x) >> 8) % 9];   /* the same magnitude twice, one negative */
        if (round % 7 == 3)
            s[(lcg(&x) >> 8) % 9] = special[(lcg(&x) >> 8) % 4];
        uint64_t blk = (lcg(&x) >> 8) % 9;
        if (round % 6)   /* most rounds: in a top block */
            blk = top_block(s);
        if (round % 6 == 0)   /* the top block's codes small: the amax is another block's */
            for (uint64_t i = 0, t = top_block(s); i < N * K; i++)
                if (i / K / 128 * SC + i % K / 128 == t)
                    w[i] &= 0xbf;
        uint64_t r = blk / SC * 128 + (lcg(&x) >> 8) % 44, c = blk % SC * 128 + (lcg(&x) >> 8) % 4;
        if (round % 3)   /* 448 planted in one block */
            w[r * K + c] = round % 2 ? 0x7e : 0xfe;
        int nan = round % 5 == 0;
        if (nan)
            w[((lcg(&x) >> 8) % N) * K + (lcg(&x) >> 8) % K] = 0x7f;
        qs_rows q = {.kind = QS_FP8_BLOCK, .data = w, .fp8_scales = s, .rows = N, .cols = K};
        float a = -1.0f, b = -1.0f;
        CHECK_EQ_INT(qs_rows_nan(&q, 0, N), nan);
        if (qs_rows_top_absmax(&q, &a) != 0)
            continue;
        decided++;
        if (!nan) {
            CHECK_EQ_INT(decoded_absmax(w, s, N, K, 0, N, &b), 0);
            if (memcmp(&a, &b, sizeof a) != 0) {
                fprintf(stderr, "  round %d: %a from the top blocks, %a decoded\n", round, a, b);
                CHECK(0);
            }
        }
    }
    CHECK(decided > 50);   /* the shortcut is taken where 448 is in a top block */
    qs_rows ct = {.kind = QS_CT_INT};
    float a;
    CHECK_EQ_INT(qs_rows_top_absmax(&ct, &a), 1);   /* no group: not a weight */
    CHECK_EQ_INT(qs_rows_nan(&ct, 0, 1), 0);
}

/* The decoded INT4 weight's largest |value|, or 1 when one is NaN or infinite. */
static int int4_decoded_absmax(const uint8_t *w, const uint8_t *s, ff_dtype sd, uint64_t N, uint64_t K,
                               uint64_t group, float *amax)
{
    uint16_t *o = malloc(N * K * 2);
    ctint_decode_rows(w, s, sd, K, group, 0, N, o);
    float best = 0.0f;
    int bad = 0;
    for (uint64_t i = 0; i < N * K; i++) {
        float f = fabsf(ff_bf16_to_f32(o[i]));
        bad |= !(f <= 3.4028235e38f);
        best = f > best ? f : best;
    }
    free(o);
    *amax = best;
    return bad;
}

static void put_scale(uint8_t *s, ff_dtype sd, uint64_t i, float v)
{
    if (sd == FF_DT_F32) {
        memcpy(s + 4 * i, &v, 4);
        return;
    }
    uint16_t h = sd == FF_DT_F16 ? ff_f32_to_f16(v) : ff_f32_to_bf16(v);
    memcpy(s + 2 * i, &h, 2);
}

/* qs_rows_top_absmax on INT4 == the max over the whole decoded weight, bit
 * for bit, or both say "bad": symmetric scales (every group a 7 or an 8),
 * random codes, groups of small codes under the top scale, ties of either
 * sign, subnormal, zero, overflowing, NaN and infinite scales, in bf16, f16
 * and f32, groups of 32 and 128. */
static void int4_amax_from_top_scales(void)
{
    enum { N = 41, KMAX = 256 };
    static uint8_t w[N * KMAX / 2], s[N * KMAX / 32 * 4];
    static const ff_dtype dts[] = {FF_DT_BF16, FF_DT_F16, FF_DT_F32};
    static const float special[] = {INFINITY, NAN, 0.0f, -0.0f, 1e-40f, 3e38f, 70000.0f, 6e-8f};
    uint32_t x = 5;
    for (int round = 0; round < 600; round++) {
        ff_dtype sd = dts[round % 3];
        /* 287 scales of group 32: a short last chunk ending in a short word */
        uint64_t group = round % 4 == 3 ? 128 : 32, K = group == 128 ? 256 : 224, ng = N * K / group;
        for (size_t i = 0; i < sizeof w; i++)
            w[i] = (uint8_t)(lcg(&x) >> 24);
        if (round % 5 < 3)   /* symmetric: no 0 or 8 codes... */
            for (size_t i = 0; i < sizeof w; i++)
                w[i] = (uint8_t)((w[i] & 0x77) | 0x11);
        for (uint64_t g = 0; g < ng; g++) {
            float v = ldexpf((float)(1 + (lcg(&x) >> 8) % 65536) / 65536.0f, (int)((lcg(&x) >> 8) % 6) - 9);
            put_scale(s, sd, g, (lcg(&x) >> 31) ? -v : v);
            if (round % 5 < 3)   /* ...but a 7 or an 8 in every group */
                w[g * group / 2 + (lcg(&x) >> 8) % (group / 2)] = round % 2 || (lcg(&x) >> 31) ? 0xff : 0x00;
        }
        if (round % 7 == 2)   /* a top-scale group of small codes */
            for (size_t i = 0; i < group / 2; i++)
                w[i] = 0x99;
        if (round % 7 == 2)
            put_scale(s, sd, 0, 1.0f);
        if (round % 11 == 5)
            put_scale(s, sd, (lcg(&x) >> 8) % ng, special[(lcg(&x) >> 8) % 8]);
        if (round % 13 == 6)   /* every scale zero */
            memset(s, 0, sizeof s);
        qs_rows q = {.kind = QS_CT_INT, .data = w, .scales = s, .sd = sd, .rows = N, .cols = K, .group = group};
        CHECK_EQ_INT(ctint_tops_build(s, sd, ng, &q.tops), 0);
        float a = -1.0f, b = -1.0f;
        int got = qs_rows_top_absmax(&q, &a), want = int4_decoded_absmax(w, s, sd, N, K, group, &b);
        ctint_tops_free(&q.tops);
        CHECK_EQ_INT(got, want);
        if (got == 0 && want == 0 && memcmp(&a, &b, sizeof a) != 0) {
            fprintf(stderr, "  round %d: %a from the top scales, %a decoded\n", round, a, b);
            CHECK(0);
        }
    }
}

int main(void)
{
    RUN(int4_nibble_order);
    RUN(int4_scale_dtypes);
    RUN(int4_rows_and_groups);
    RUN(mxfp4_values);
    RUN(configs);
    RUN(mxfp4_exact);
    RUN(fp8_absmax_from_codes);
    RUN(fp8_amax_from_top_blocks);
    RUN(int4_amax_from_top_scales);
    return UNIT_END();
}

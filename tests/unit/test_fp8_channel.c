/* FP8 weight-only channel quantization (src/kernels/fp8_channel.h): the
 * row scale bf16(amax / 448) with eps for zero, each weight bf16(w / s)
 * then e4m3fn RNE with -0 -> +0, against llm-compressor 0.14's bytes
 * (research notes, issue 40) and against an e4m3 nearest-value search
 * written independently of ff_f32_to_e4m3. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "fp8_channel.h"
#include "unit.h"

static uint16_t bf(float f) { return ff_f32_to_bf16(f); }

static double e4m3_value(int b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

/* The nearest finite e4m3fn code by search, ties to the even mantissa. */
static uint8_t e4m3_nearest(double x)
{
    int best = -1;
    double bd = INFINITY;
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f || (signbit(x) != 0) != (b >> 7))
            continue;
        double d = fabs(e4m3_value(b) - x);
        if (d < bd || (d == bd && (b & 1) == 0)) {
            bd = d;
            best = b;
        }
    }
    return (uint8_t)best;
}

/* llm-compressor's bytes for [-0.0, 1e-30, -1e-30, 3e-3, -3e-3] in a row
 * whose amax puts 3e-3 at 22 (00 00 80 5b db: -0 -> +0, a tiny negative ->
 * 0x80), and an all-zero row (0x3C00), as its oneshot output has them. */
static void test_llmc_rows(void)
{
    uint16_t w[2][16] = {{0}};
    const float row[6] = {-0.0f, 1e-30f, -1e-30f, 3e-3f, -3e-3f, 0.0611f};
    for (int i = 0; i < 6; i++)
        w[0][i] = bf(row[i]);
    uint8_t codes[32];
    uint16_t sc[2];
    CHECK(fp8ch_quantize_rows(w, FF_DT_BF16, 16, 0, 2, codes, (uint8_t *)sc) == UINT64_MAX);
    const uint8_t want[5] = {0x00, 0x00, 0x80, 0x5b, 0xdb};
    CHECK(memcmp(codes, want, 5) == 0);
    CHECK_EQ_INT(sc[1], 0x3C00);   /* an all-zero row: torch.finfo(bfloat16).eps */
    CHECK_EQ_INT(codes[16], 0);
    CHECK_EQ_INT(sc[0], bf(ff_bf16_to_f32(bf(0.0611f)) / 448.0f));
    CHECK_EQ_INT(codes[5], 0x7e);
}

/* Every element: the quotient rounded to bf16 first, then the nearest e4m3. */
static void test_against_search(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    enum { COLS = 64, ROWS = 32 };
    uint16_t w[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        w[i] = bf((float)(u * ldexp(1.0, (int)(i / COLS) - 16)));
    }
    uint8_t codes[ROWS * COLS];
    uint16_t sc[ROWS];
    CHECK(fp8ch_quantize_rows(w, FF_DT_BF16, COLS, 0, ROWS, codes, (uint8_t *)sc) == UINT64_MAX);
    for (int r = 0; r < ROWS; r++) {
        float amax = 0;
        for (int i = 0; i < COLS; i++)
            amax = fmaxf(amax, fabsf(ff_bf16_to_f32(w[r * COLS + i])));
        float s = ff_bf16_to_f32(bf(amax / 448.0f));
        CHECK_EQ_INT(sc[r], bf(s));
        for (int i = 0; i < COLS; i++) {
            float q = ff_bf16_to_f32(bf(ff_bf16_to_f32(w[r * COLS + i]) / s));
            uint8_t want = q == 0.0f ? 0 : e4m3_nearest(fmax(-448.0, fmin(448.0, q)));
            CHECK_EQ_INT(codes[r * COLS + i], want);
        }
    }
}

/* Rows quantized in parts give the bytes of the whole; a NaN is reported by
 * its index in the matrix. */
static void test_rows_and_nan(void)
{
    uint16_t w[4 * 16];
    for (int i = 0; i < 64; i++)
        w[i] = bf((float)(i - 30) * 0.37f);
    uint8_t a[64], b[64];
    uint16_t sa[4], sb[4];
    fp8ch_quantize_rows(w, FF_DT_BF16, 16, 0, 4, a, (uint8_t *)sa);
    fp8ch_quantize_rows(w, FF_DT_BF16, 16, 1, 3, b + 16, (uint8_t *)(sb + 1));
    fp8ch_quantize_rows(w, FF_DT_BF16, 16, 0, 1, b, (uint8_t *)sb);
    CHECK(memcmp(a, b, 64) == 0 && memcmp(sa, sb, 8) == 0);
    w[37] = 0x7fc0;
    CHECK_EQ_INT(fp8ch_quantize_rows(w, FF_DT_BF16, 16, 0, 4, a, (uint8_t *)sa), 37);
    /* a row's largest weight is +-448 exactly */
    CHECK_EQ_INT(a[0], 0xfe);
    CHECK_EQ_INT(a[63], 0x7e);
}

/* f32 and f16 weights: the scale in the weight's dtype, eps its own. */
static void test_other_dtypes(void)
{
    float w32[16] = {0};
    uint8_t c[16];
    float s32;
    fp8ch_quantize_rows(w32, FF_DT_F32, 16, 0, 1, c, (uint8_t *)&s32);
    CHECK(s32 == 0x1p-23f);
    uint16_t w16[16] = {0}, s16;
    fp8ch_quantize_rows(w16, FF_DT_F16, 16, 0, 1, c, (uint8_t *)&s16);
    CHECK_EQ_INT(s16, ff_f32_to_f16(0x1p-10f));
    w32[3] = 1.0f;
    w32[4] = -0.5f;
    fp8ch_quantize_rows(w32, FF_DT_F32, 16, 0, 1, c, (uint8_t *)&s32);
    CHECK(s32 == 1.0f / 448.0f);
    CHECK_EQ_INT(c[3], 0x7e);
    CHECK_EQ_INT(c[4], 0xf6);   /* -224 */
}

int main(void)
{
    RUN(test_llmc_rows);
    RUN(test_against_search);
    RUN(test_rows_and_nan);
    RUN(test_other_dtypes);
    return UNIT_END();
}

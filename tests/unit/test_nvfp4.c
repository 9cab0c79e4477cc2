/* The NVFP4 kernel on hand-made vectors: codes, ties, signs, zero groups,
 * scale clamping and subnormals, global-scale rounding, NaN/Inf refusal. */
#include <float.h>
#include <math.h>

#include "dtype.h"
#include "nvfp4.h"
#include "unit.h"

/* Quantizes one 16-wide f32 row with global scale gs. */
static void quant16(const float *x, float gs, uint8_t packed[8], uint8_t *scale)
{
    nvfp4_quantize_rows_scalar(x, FF_DT_F32, 16, 0, 1, gs, packed, scale);
}

static uint8_t code_at(const uint8_t *packed, int i)
{
    return (uint8_t)((i & 1) ? packed[i / 2] >> 4 : packed[i / 2] & 15);
}

/* With amax 6 and gs 1 the fp8 scale is exactly 1, so y == x. */
static void test_every_code(void)
{
    float x[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.5f, -1, -1.5f, -2, -3, -4, -6, 0};
    static const uint8_t want[16] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 0};
    uint8_t p[8], s;
    quant16(x, 1.0f, p, &s);
    CHECK_EQ_INT(s, ff_f32_to_e4m3(1.0f));
    for (int i = 0; i < 16; i++)
        CHECK_EQ_INT(code_at(p, i), want[i]);
    for (int c = 0; c < 16; c++)
        CHECK(nvfp4_fp4_code(nvfp4_code_value[c]) == (c == 8 ? 0 : c));
}

/* compressed-tensors' buckets: ties go to the even code. */
static void test_ties(void)
{
    CHECK_EQ_INT(nvfp4_fp4_code(0.25f), 0);
    CHECK_EQ_INT(nvfp4_fp4_code(nextafterf(0.25f, 1)), 1);
    CHECK_EQ_INT(nvfp4_fp4_code(0.75f), 2);
    CHECK_EQ_INT(nvfp4_fp4_code(nextafterf(0.75f, 0)), 1);
    CHECK_EQ_INT(nvfp4_fp4_code(1.25f), 2);
    CHECK_EQ_INT(nvfp4_fp4_code(nextafterf(1.25f, 2)), 3);
    CHECK_EQ_INT(nvfp4_fp4_code(1.75f), 4);
    CHECK_EQ_INT(nvfp4_fp4_code(2.5f), 4);
    CHECK_EQ_INT(nvfp4_fp4_code(nextafterf(2.5f, 3)), 5);
    CHECK_EQ_INT(nvfp4_fp4_code(3.5f), 6);
    CHECK_EQ_INT(nvfp4_fp4_code(5.0f), 6);
    CHECK_EQ_INT(nvfp4_fp4_code(nextafterf(5.0f, 6)), 7);
    CHECK_EQ_INT(nvfp4_fp4_code(100.0f), 7);      /* clamped at 6 */
    CHECK_EQ_INT(nvfp4_fp4_code(-2.5f), 12);
    CHECK_EQ_INT(nvfp4_fp4_code(-5.5f), 15);
}

/* torch.sign(-0.0) is 0, so -0.0 packs as 0x0; a small negative rounds to
 * -0.0 and keeps the sign bit (0x8), as compressed-tensors' pack does. */
static void test_signed_zero(void)
{
    CHECK_EQ_INT(nvfp4_fp4_code(-0.0f), 0);
    CHECK_EQ_INT(nvfp4_fp4_code(-0.1f), 8);
    CHECK_EQ_INT(nvfp4_fp4_code(0.1f), 0);
}

static void test_zero_group_and_tensor(void)
{
    float x[16] = {0};
    uint8_t p[8], s;
    quant16(x, 1.0f, p, &s);
    CHECK(ff_e4m3_to_f32(s) == NVFP4_ZERO_SCALE);
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(p[i], 0);
    /* 2688 / tiny overflows: an all-zero tensor gets global scale 1 */
    CHECK(nvfp4_global_scale(0.0f, FF_DT_BF16) == 1.0f);
    CHECK(nvfp4_global_scale(0.0f, FF_DT_F32) == 1.0f);
}

static void test_scale_clamp_and_subnormal(void)
{
    float x[16] = {6.0f};
    uint8_t p[8], s;
    quant16(x, 1e6f, p, &s);            /* 1 * 1e6 clamps to 448 */
    CHECK_EQ_INT(s, 0x7e);
    CHECK(ff_e4m3_to_f32(s) == 448.0f);
    x[0] = 6.0f * 0x1p-9f;              /* s = 2^-9: the smallest fp8 subnormal */
    quant16(x, 1.0f, p, &s);
    CHECK_EQ_INT(s, 0x01);
    CHECK_EQ_INT(code_at(p, 0), 7);
    x[0] = 6.0f * 0x1p-11f;             /* s rounds to 0 in fp8 -> 0.125 */
    quant16(x, 1.0f, p, &s);
    CHECK(ff_e4m3_to_f32(s) == NVFP4_ZERO_SCALE);
}

static void test_e4m3_roundtrip(void)
{
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f)
            continue;                   /* NaN */
        float f = ff_e4m3_to_f32((uint8_t)c);
        CHECK_EQ_INT(ff_f32_to_e4m3(f), c == 0x80 ? 0x80 : c);
    }
    CHECK_EQ_INT(ff_f32_to_e4m3(17.0f), ff_f32_to_e4m3(16.0f));   /* tie to even */
    CHECK_EQ_INT(ff_f32_to_e4m3(19.0f), ff_f32_to_e4m3(20.0f));
    CHECK_EQ_INT(ff_f32_to_e4m3(1e9f), 0x7e);                      /* saturates */
    CHECK(ff_e4m3_to_f32(0x7e) == 448.0f);
}

/* 2688/amax is reciprocal-then-multiply in the weight's dtype (torch's
 * __rtruediv__); 31360 is what llm-compressor stored for this amax. */
static void test_global_scale_rounding(void)
{
    CHECK(nvfp4_global_scale(0.08544921875f, FF_DT_BF16) == 31360.0f);
    CHECK(nvfp4_global_scale(1.0f, FF_DT_F32) == 2688.0f);
    CHECK(nvfp4_global_scale(6.0f, FF_DT_F32) == 448.0f);
}

static void test_nan_inf_refused(void)
{
    float x[4] = {1, NAN, 2, 3};
    float amax;
    uint64_t bad;
    CHECK(nvfp4_absmax(x, FF_DT_F32, 4, &amax, &bad) == 1);
    CHECK_EQ_INT(bad, 1);
    x[1] = -INFINITY;
    CHECK(nvfp4_absmax(x, FF_DT_F32, 4, &amax, &bad) == 1);
    x[1] = -5;
    CHECK(nvfp4_absmax(x, FF_DT_F32, 4, &amax, &bad) == 0);
    CHECK(amax == 5.0f);
}

static void test_dequantize_inverse(void)
{
    float x[32], y[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)((i * 7919) % 23) / 7.0f - 1.5f;
    float amax;
    uint64_t bad;
    nvfp4_absmax(x, FF_DT_F32, 32, &amax, &bad);
    float gs = nvfp4_global_scale(amax, FF_DT_F32);
    uint8_t p[16], s[2];
    nvfp4_quantize_rows_scalar(x, FF_DT_F32, 32, 0, 1, gs, p, s);
    nvfp4_dequantize_rows(p, s, gs, 32, 1, y);
    for (int i = 0; i < 32; i++) {
        float eff = ff_e4m3_to_f32(s[i / 16]) / gs;
        CHECK(fabsf(y[i] - x[i]) <= eff * 1.0f + 1e-6f);   /* within one E2M1 step */
        CHECK(y[i] == nvfp4_code_value[code_at(p, i)] * eff);
    }
}

/* bf16 input: the group scale amax/6 is rounded to bf16 before the global
 * scale multiplies it (the observer's stats are in the weight dtype). */
static void test_bf16_observed_rounding(void)
{
    uint16_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = ff_f32_to_bf16(i == 3 ? 0.0712890625f : 0.01f * (float)i);
    uint8_t p[8], s;
    float gs = 31360.0f;
    nvfp4_quantize_rows_scalar(w, FF_DT_BF16, 16, 0, 1, gs, p, &s);
    /* amax is bf16(0.13), at i = 13 */
    float want = ff_round_bf16(ff_bf16_to_f32(ff_f32_to_bf16(0.13f)) / 6.0f) * gs;
    CHECK_EQ_INT(s, ff_f32_to_e4m3(want > 448 ? 448 : want));
}

int main(void)
{
    RUN(test_every_code);
    RUN(test_ties);
    RUN(test_signed_zero);
    RUN(test_zero_group_and_tensor);
    RUN(test_scale_clamp_and_subnormal);
    RUN(test_e4m3_roundtrip);
    RUN(test_global_scale_rounding);
    RUN(test_nan_inf_refused);
    RUN(test_dequantize_inverse);
    RUN(test_bf16_observed_rounding);
    return UNIT_END();
}

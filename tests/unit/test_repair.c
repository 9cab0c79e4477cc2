/* repair-scales' arithmetic: re-expressing an E4M3 block scale under a
 * smaller global scale (exact for powers of two, round-to-nearest-even,
 * never up, one rounding only), and the per-piece statistics. */
#include <math.h>

#include "dtype.h"
#include "nvfp4.h"
#include "repair.h"
#include "unit.h"

static float v(uint8_t b) { return ff_e4m3_to_f32(b); }

/* Same global scale: every byte comes back as it was (448 included). */
static void test_identity(void)
{
    for (int b = 0; b < 0x7f; b++) {
        CHECK_EQ_INT(repair_rescale((uint8_t)b, 123.25f, 123.25f), b);
        CHECK_EQ_INT(repair_rescale((uint8_t)(b | 0x80), 7.0f, 7.0f), b | 0x80);
    }
}

/* Half the global scale: a normal scale whose half is normal halves exactly,
 * and so does every even subnormal. */
static void test_power_of_two_exact(void)
{
    for (int b = 0x10; b < 0x7f; b++)
        CHECK(v(repair_rescale((uint8_t)b, 2.0f, 1.0f)) == v((uint8_t)b) * 0.5f);
    for (int m = 2; m < 8; m += 2)
        CHECK(v(repair_rescale((uint8_t)m, 1024.0f, 512.0f)) == v((uint8_t)m) * 0.5f);
}

/* g_common <= g_piece: a scale never grows, so none can pass 448. */
static void test_never_up(void)
{
    static const float ratios[][2] = {{1.0f, 0.999f}, {3.0f, 2.0f}, {448.0f, 1.0f}, {1e6f, 7.5e5f}, {2688.0f, 2687.0f}};
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++)
        for (int b = 0; b < 0x7f; b++) {
            uint8_t n = repair_rescale((uint8_t)b, ratios[r][0], ratios[r][1]);
            CHECK(v(n) <= v((uint8_t)b));
            CHECK(v(n) <= NVFP4_FP8_MAX);
        }
}

/* Exact midpoints go to the even mantissa. */
static void test_ties_to_even(void)
{
    CHECK_EQ_INT(repair_rescale(0x38, 32.0f, 31.0f), 0x38);    /* 0.96875: 0.9375 (m7) | 1.0 (m0) */
    CHECK_EQ_INT(repair_rescale(0x3a, 20.0f, 17.0f), 0x38);    /* 1.0625: 1.0 (m0) | 1.125 (m1) */
    CHECK_EQ_INT(repair_rescale(0x3c, 24.0f, 19.0f), 0x3a);    /* 1.1875: 1.125 (m1) | 1.25 (m2) */
}

/* A quotient just below a midpoint whose f32 rounding lands on it: a plain
 * (float) then E4M3 conversion would round twice and go up. */
static void test_no_double_rounding(void)
{
    /* 8126494 / 8388639 = 0.96875 - 1/(32 * 8388639); both are exact floats */
    CHECK((float)(8126494.0 / 8388639.0) == 0.96875f);
    CHECK_EQ_INT(repair_rescale(0x38, 8388639.0f, 8126494.0f), 0x37);
    /* just above: 1.0 either way */
    CHECK_EQ_INT(repair_rescale(0x38, 8388609.0f, 8126465.0f), 0x38);
}

static void fill_codes(uint8_t *p, uint8_t byte)
{
    for (int i = 0; i < NVFP4_GROUP / 2; i++)
        p[i] = byte;
}

/* Four blocks of one row: exact, inexact, underflow to subnormal, to zero. */
static void test_rows_stats(void)
{
    uint8_t packed[4 * 8], scales[4] = {0x40, 0x38, 0x08, 0x01}, out[4];
    fill_codes(packed, 0x22);          /* every value 1.0 x scale */
    fill_codes(packed + 8, 0x22);
    fill_codes(packed + 16, 0x22);
    fill_codes(packed + 24, 0x22);
    repair_stats st = {0};
    repair_rescale_rows(packed, scales, 1, 64, 4.0f, 1.0f, out, &st);   /* ratio 1/4 */
    CHECK(v(out[0]) == 0.5f);          /* 2.0 / 4 */
    CHECK(v(out[1]) == 0.25f);
    CHECK_EQ_INT(out[2], 0x02);        /* 2^-6 / 4 = 2^-8: subnormal */
    CHECK_EQ_INT(out[3], 0x00);        /* 2^-9 / 4 rounds to zero */
    CHECK_EQ_INT(st.blocks, 4);
    CHECK_EQ_INT(st.changed, 4);
    CHECK_EQ_INT(st.subnormal, 1);
    CHECK_EQ_INT(st.zero, 1);
    CHECK(st.worst_rel == 1.0);        /* the zeroed block lost its values */

    repair_stats s2 = {0};
    uint8_t one[1] = {0x38}, o1[1];
    repair_rescale_rows(packed, one, 1, 16, 32.0f, 31.0f, o1, &s2);
    CHECK_EQ_INT(o1[0], 0x38);         /* tie to even: the byte stays, the global scale moved */
    CHECK_EQ_INT(s2.changed, 0);
    /* decoded 1/31 instead of 1/32: relative change 1/31, give or take bf16 */
    CHECK(fabs(s2.worst_rel - 1.0 / 31.0) < 0.01);
    CHECK(s2.se > 0 && s2.ss > 0);
}

/* An all-zero block keeps CT's eps instead of a zero scale; its values do not move. */
static void test_zero_block(void)
{
    uint8_t packed[8], s[1] = {0x01}, o[1];
    fill_codes(packed, 0x88);          /* -0.0 codes */
    repair_stats st = {0};
    repair_rescale_rows(packed, s, 1, 16, 4.0f, 1.0f, o, &st);
    CHECK_EQ_INT(o[0], ff_f32_to_e4m3(NVFP4_ZERO_SCALE));
    CHECK_EQ_INT(st.zero, 0);
    CHECK(st.worst_rel == 0.0 && st.ss == 0.0);
}

int main(void)
{
    RUN(test_identity);
    RUN(test_power_of_two_exact);
    RUN(test_never_up);
    RUN(test_ties_to_even);
    RUN(test_no_double_rounding);
    RUN(test_rows_stats);
    RUN(test_zero_block);
    return UNIT_END();
}

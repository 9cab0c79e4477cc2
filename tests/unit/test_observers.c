/* The MSE observers (nvfp4_mse.c) on hand-made groups: registry names and
 * llm-compressor's defaults, candidate rounding in bf16, the error of an exact
 * group, the bf16 power (exponent rounded to 2.40625), the tensor-wide early
 * stop, and quantization with chosen ranges equal to min/max's when the
 * search keeps step 0. Bit-exactness against llm-compressor itself is
 * tests/conformance/t_observers.sh. */
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "nvfp4.h"
#include "nvfp4_mse.h"
#include "unit.h"

static uint16_t bf(float f) { return ff_f32_to_bf16(f); }

static void test_names(void)
{
    nvfp4_obs o;
    CHECK(nvfp4_obs_from_name("minmax", &o) == 0 && o.kind == NVFP4_OBS_MINMAX);
    CHECK(!strcmp(o.llmc_name, "memoryless_minmax"));
    CHECK(nvfp4_obs_from_name("memoryless_minmax", &o) == 0 && o.kind == NVFP4_OBS_MINMAX);
    CHECK(nvfp4_obs_from_name("mse", &o) == 0 && o.kind == NVFP4_OBS_MSE);
    CHECK(!strcmp(o.llmc_name, "memoryless_mse"));
    CHECK_EQ_INT(o.steps, 20);
    CHECK_EQ_INT(o.patience, 5);
    CHECK(nvfp4_obs_needs_mask(&o));
    CHECK(nvfp4_obs_from_name("memoryless_mse", &o) == 0 && o.kind == NVFP4_OBS_MSE);
    const char *exp[] = {"expanded-mse", "expanded_mse", "nvfp4_expanded_mse", "fouroversix"};
    for (int i = 0; i < 4; i++) {
        CHECK(nvfp4_obs_from_name(exp[i], &o) == 0 && o.kind == NVFP4_OBS_EXPANDED_MSE);
        CHECK(!strcmp(o.llmc_name, "nvfp4_expanded_mse"));
        CHECK_EQ_INT(o.steps, 111);      /* int((1 - 0.8/1.8) * 200) */
        CHECK(!nvfp4_obs_needs_mask(&o));  /* patience 1000 never fires */
    }
    CHECK(nvfp4_obs_from_name("static_minmax", &o) == -1);
    CHECK(nvfp4_obs_from_name("", &o) == -1);
}

static void test_candidates(void)
{
    nvfp4_obs o;
    nvfp4_obs_from_name("expanded-mse", &o);
    /* 1.8 in f32 times 1.0, rounded to bf16: 1.796875 */
    CHECK(nvfp4_mse_candidate(&o, FF_DT_BF16, 1.0f, 0) == 1.796875f);
    /* step 110: 1.796875 * (float)0.45 rounded to bf16 */
    CHECK(nvfp4_mse_candidate(&o, FF_DT_BF16, 1.0f, 110) == ff_round_bf16(1.796875f * 0.45f));
    nvfp4_obs_from_name("mse", &o);
    CHECK(nvfp4_mse_candidate(&o, FF_DT_BF16, 0.75f, 0) == 0.75f);
    CHECK(nvfp4_mse_candidate(&o, FF_DT_BF16, 0.75f, 19) == ff_round_bf16(0.75f * 0.81f));
    CHECK(nvfp4_mse_candidate(&o, FF_DT_F32, 0.75f, 19) == 0.75f * 0.81f);
}

static void test_group_error(void)
{
    nvfp4_obs o;
    nvfp4_obs_from_name("mse", &o);
    /* on the grid of c = 6 (scale 1): exact, error 0 */
    float x[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.5f, -1, -1.5f, -2, -3, -4, -6, 0};
    CHECK(nvfp4_mse_group_error(x, 6.0f, FF_DT_BF16, &o) == 0.0f);
    /* one element off by 0.25 (scale 1): y = 2.25 -> 2, |d| = 0.25,
     * 0.25^2.40625 (torch rounds the exponent to bf16) rounded to bf16 */
    x[15] = 2.25f;
    float want = ff_round_bf16((float)pow(0.25, 2.40625));
    CHECK(nvfp4_mse_group_error(x, 6.0f, FF_DT_BF16, &o) == want);
    CHECK(want != ff_round_bf16((float)pow(0.25, 2.4)));
    /* an all-zero group: scale 0 -> bf16 eps; error 0 */
    float z[16] = {0};
    CHECK(nvfp4_mse_group_error(z, 0.0f, FF_DT_BF16, &o) == 0.0f);
}

static void test_stop(void)
{
    nvfp4_obs o;
    nvfp4_obs_from_name("mse", &o);
    CHECK_EQ_INT(nvfp4_mse_stop_step(&o, 1), 5);           /* steps 1..5 idle */
    CHECK_EQ_INT(nvfp4_mse_stop_step(&o, 0xfffff), 19);    /* never idle */
    CHECK_EQ_INT(nvfp4_mse_stop_step(&o, 1 | 1 << 4 | 1 << 9), 14);
    CHECK_EQ_INT(nvfp4_mse_stop_step(&o, 0), 4);
}

/* [1, a x15] with a = 0.400390625: llm-compressor's search (found by brute
 * force) improves at step 0 and next only after 5 idle steps, so with
 * patience 5 step 0 wins though a full search would shrink. */
static void test_early_stop_group(void)
{
    nvfp4_obs o;
    nvfp4_obs_from_name("mse", &o);
    uint16_t w[16];
    w[0] = bf(1.0f);
    for (int i = 1; i < 16; i++)
        w[i] = bf(0.400390625f);
    uint64_t mask = 0, any = 0;
    nvfp4_mse_search_rows(w, FF_DT_BF16, 16, 0, 1, &o, &mask, NULL, &any);
    CHECK(mask & 1);
    CHECK(any == mask);
    CHECK((mask & 0x3e) == 0);      /* steps 1..5 do not improve */
    CHECK(mask >> 6 != 0);          /* a later step would */
    int stop = nvfp4_mse_stop_step(&o, any);
    CHECK_EQ_INT(stop, 5);
    float c;
    CHECK(nvfp4_mse_choose_rows(w, FF_DT_BF16, 16, 0, 1, &o, &mask, NULL, stop, &c) == 1.0f);
    CHECK(c == 1.0f);
    float full;
    nvfp4_mse_choose_rows(w, FF_DT_BF16, 16, 0, 1, &o, &mask, NULL, 19, &full);
    CHECK(full < 1.0f);
}

/* When every group keeps step 0 (mse, expand 1), the ranges are max|x| and
 * the bytes are the min/max kernel's. */
static void test_ranges_match_minmax(void)
{
    uint16_t w[64];
    float gamax[4];
    for (int i = 0; i < 64; i++)
        w[i] = bf((float)((i * 37) % 23 - 11) / 16.0f);
    for (int g = 0; g < 4; g++) {
        float m = 0;
        for (int i = 0; i < 16; i++)
            m = fmaxf(m, fabsf(ff_bf16_to_f32(w[g * 16 + i])));
        gamax[g] = m;
    }
    float gs = nvfp4_global_scale(0.6875f, FF_DT_BF16);
    uint8_t p1[32], s1[4], p2[32], s2[4];
    nvfp4_quantize_rows_scalar(w, FF_DT_BF16, 64, 0, 1, gs, p1, s1);
    nvfp4_quantize_rows_ranges(w, FF_DT_BF16, 64, 0, 1, gs, gamax, p2, s2);
    CHECK(!memcmp(p1, p2, sizeof p1));
    CHECK(!memcmp(s1, s2, sizeof s1));
}

/* The AVX-512 search (sixteen groups a vector, elements transposed) gives the
 * scalar search's masks and winning steps, including a partial last vector,
 * zero groups and subnormal scales. */
static void test_simd_matches_scalar(void)
{
    enum { ROWS = 7, COLS = 48 };   /* 21 groups: one full vector and a tail */
    uint16_t w[ROWS * COLS];
    uint32_t st = 12345;
    for (int i = 0; i < ROWS * COLS; i++) {
        st = st * 1664525u + 1013904223u;
        float v = ((float)(st >> 8) / 16777216.0f - 0.5f);
        int row = i / COLS;
        if (row == 2)
            v *= 1e-37f;               /* subnormal local scales */
        else if (row == 4 && i % COLS < 16)
            v = 0.0f;                  /* an all-zero group */
        else if (row == 5)
            v = v * v * v * 40.0f;     /* heavy-ish tails */
        w[i] = bf(v);
    }
    const char *names[] = {"mse", "expanded-mse"};
    for (int n = 0; n < 2; n++) {
        nvfp4_obs o;
        nvfp4_obs_from_name(names[n], &o);
        uint64_t m1[ROWS * COLS / 16] = {0}, m2[ROWS * COLS / 16] = {0}, a1 = 0, a2 = 0;
        uint8_t i1[ROWS * COLS / 16] = {0}, i2[ROWS * COLS / 16] = {0};
        nvfp4_mse_search_rows(w, FF_DT_BF16, COLS, 0, ROWS, &o, m1, i1, &a1);
        nvfp4_mse_search_rows_simd(w, FF_DT_BF16, COLS, 0, ROWS, &o, m2, i2, &a2);
        CHECK(!memcmp(m1, m2, sizeof m1));
        CHECK(!memcmp(i1, i2, sizeof i1));
        CHECK(a1 == a2);
        /* from row 3 on its own (row0 offset) */
        uint64_t m3[COLS / 16] = {0}, a3 = 0;
        uint8_t i3[COLS / 16] = {0};
        nvfp4_mse_search_rows_simd(w, FF_DT_BF16, COLS, 3, 1, &o, m3, i3, &a3);
        if (nvfp4_obs_needs_mask(&o))
            CHECK(!memcmp(m3, m1 + 3 * (COLS / 16), sizeof m3));
        else
            CHECK(!memcmp(i3, i1 + 3 * (COLS / 16), sizeof i3));
    }
}

int main(void)
{
    RUN(test_names);
    RUN(test_candidates);
    RUN(test_group_error);
    RUN(test_stop);
    RUN(test_early_stop_group);
    RUN(test_ranges_match_minmax);
    RUN(test_simd_matches_scalar);
    return UNIT_END();
}

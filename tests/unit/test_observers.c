/* The MSE observers (nvfp4_mse.c) on hand-made groups: registry names and
 * llm-compressor's defaults, candidate rounding in bf16, the error of an exact
 * group, the bf16 power (exponent rounded to 2.40625), the tensor-wide early
 * stop, and quantization with chosen ranges equal to min/max's when the
 * search keeps step 0; and every search kernel (scalar, AVX2, AVX-512)
 * against a reference of the search written out below, error by error on
 * every bf16 magnitude and choice by choice on random and adversarial groups.
 * Bit-exactness against llm-compressor itself is tests/conformance/t_observers.sh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "nvfp4.h"
#include "nvfp4_mse.h"
#include "nvfp4_mse_simd.h"
#include "nvfp4_simd.h"
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

/* ---- every kernel against a reference of the search, written out here from
 * docs/observers.md step by step (no pow table: pow in double, rounded to
 * f32 then bf16, as the library's table was checked against torch). */

static float ref_group_error(const float *x, float c)
{
    float s = ff_round_bf16(c / 6.0f);
    if (s == 0.0f)
        s = 0x1p-7f;                                      /* finfo(bf16).eps */
    float acc = 0.0f;
    for (int i = 0; i < 16; i++) {
        float y = ff_round_bf16(x[i] / s);
        float q = nvfp4_code_value[nvfp4_fp4_code(y)];
        float diff = ff_round_bf16(ff_round_bf16(q * s) - x[i]);
        acc += ff_round_bf16((float)pow((double)fabsf(diff), 2.40625));
    }
    return ff_round_bf16(acc);
}

/* the search as it always ran: every step of a group in order, err < best */
static void ref_search(const uint16_t *w, uint64_t groups, const nvfp4_obs *o, uint64_t *mask, uint8_t *idx,
                       uint64_t *any)
{
    for (uint64_t g = 0; g < groups; g++) {
        float x[16], amax = 0.0f;
        for (int i = 0; i < 16; i++) {
            x[i] = ff_bf16_to_f32(w[g * 16 + i]);
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        }
        float best = ff_bf16_to_f32(0x7f7f);
        uint64_t m = 0;
        int bi = 0;
        for (int i = 0; i < o->steps; i++) {
            float err = ref_group_error(x, nvfp4_mse_candidate(o, FF_DT_BF16, amax, i));
            if (err < best) {
                best = err;
                bi = i;
                m |= i < 64 ? 1ull << i : 0;
            }
        }
        mask[g] = m;
        idx[g] = (uint8_t)bi;
        *any |= m;
    }
}

/* "avx512" is one of the last two on any CPU; both are checked everywhere */
static const char *const kernels[] = {"scalar", "avx2", "avx512", "avx512-gather", "avx512-arith"};
#define NKERNELS (int)(sizeof kernels / sizeof *kernels)

static uint32_t rnd(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

/* roughly normal (sum of three uniforms), times scale */
static uint16_t rnd_bf(uint32_t *st, float scale)
{
    float v = ((float)rnd(st) + (float)rnd(st) + (float)rnd(st)) / 16777216.0f - 1.5f;
    return bf(v * scale);
}

/* Random and adversarial rows, COLS = 48 (3 groups a row) so that blocks of
 * 8 and 16 groups end inside rows and leave partial last vectors. */
enum { TCOLS = 48, TROWS = 64, TGROUPS = TROWS * TCOLS / 16 };

static void fill_cases(uint16_t *w)
{
    uint32_t st = 2024;
    for (int r = 0; r < TROWS; r++) {
        uint16_t *row = w + r * TCOLS;
        int kind = r % 16;
        for (int i = 0; i < TCOLS; i++) {
            float f = 0.0f;
            switch (kind) {
            case 0: row[i] = rnd_bf(&st, 0.02f); continue;               /* weight-like */
            case 1: row[i] = rnd_bf(&st, 1e-38f); continue;              /* subnormal values and scales */
            case 2: f = i % 16 == 3 ? 0.5f : 0.0f; break;                 /* one element, zeros */
            case 3: f = 0.0f; break;                                      /* all zero */
            case 4: f = 0.3125f; break;                                   /* all equal */
            case 5: f = i % 2 ? -0.75f : 0.75f; break;                    /* ties by symmetry */
            case 6: f = i % 16 == 0 ? 40.0f : (float)(i % 7 - 3) * 1e-3f; break;   /* an outlier */
            case 7: row[i] = (uint16_t)(rnd(&st) & 0x807f); continue;               /* raw subnormal bits */
            case 8: row[i] = (uint16_t)(0x7f00 + (rnd(&st) & 0x7f)) ^ (uint16_t)(i & 1) << 15; continue; /* ~1e38 */
            case 9: f = i % 16 == 0 ? -0.0f : 0.0f; break;               /* signed zeros */
            case 10: row[i] = (uint16_t)(rnd(&st) & 0x3fff); continue;  /* any bits below 2 */
            case 11: f = (float)((i % 16) - 8) / 4.0f; break;            /* on and between grid points */
            default: row[i] = rnd_bf(&st, kind == 12 ? 3.0f : 0.05f); continue;
            }
            row[i] = bf(f);
        }
    }
}

/* Every kernel's masks, winning steps and OR equal the reference's, on the
 * whole matrix and on row slices (what separate threads search). */
static void test_kernels_match_reference(void)
{
    static uint16_t w[TROWS * TCOLS];
    fill_cases(w);
    const char *obs[] = {"mse", "expanded-mse"};
    for (int n = 0; n < 2; n++) {
        nvfp4_obs o;
        nvfp4_obs_from_name(obs[n], &o);
        int use_mask = nvfp4_obs_needs_mask(&o);
        uint64_t rm[TGROUPS], ra = 0;
        uint8_t ri[TGROUPS];
        ref_search(w, TGROUPS, &o, rm, ri, &ra);
        for (int k = 0; k < NKERNELS; k++) {
            nvfp4_mse_search_fn fn = nvfp4_mse_search_by_name(kernels[k]);
            if (!fn)
                continue;
            uint64_t m[TGROUPS] = {0}, a = 0;
            uint8_t ix[TGROUPS] = {0};
            fn(w, FF_DT_BF16, TCOLS, 0, TROWS, &o, m, ix, &a);
            CHECK(use_mask ? !memcmp(m, rm, sizeof m) && a == ra : !memcmp(ix, ri, sizeof ix));
            /* 1, 5 and 7 rows at a time from odd offsets */
            for (int step = 1; step <= 7; step += 2) {
                uint64_t ms[TGROUPS] = {0}, as = 0;
                uint8_t is[TGROUPS] = {0};
                for (int r = 0; r < TROWS; r += step) {
                    int nr = TROWS - r < step ? TROWS - r : step;
                    fn(w, FF_DT_BF16, TCOLS, (uint64_t)r, (uint64_t)nr, &o, ms + r * 3, is + r * 3, &as);
                }
                CHECK(use_mask ? !memcmp(ms, rm, sizeof ms) && as == ra : !memcmp(is, ri, sizeof is));
            }
        }
    }
}

/* f16 and f32 weights go to the scalar search whatever the kernel. */
static void test_kernels_other_dtypes(void)
{
    enum { N = 5 * 32 };
    float w32[N];
    uint16_t w16[N];
    uint32_t st = 5;
    for (int i = 0; i < N; i++) {
        w32[i] = ff_bf16_to_f32(rnd_bf(&st, 0.1f)) * 1.001f;
        w16[i] = ff_f32_to_f16(w32[i]);
    }
    nvfp4_obs o;
    nvfp4_obs_from_name("mse", &o);
    for (int k = 1; k < NKERNELS; k++) {
        nvfp4_mse_search_fn fn = nvfp4_mse_search_by_name(kernels[k]);
        if (!fn)
            continue;
        uint64_t m1[N / 16], m2[N / 16], a1 = 0, a2 = 0;
        nvfp4_mse_search_rows(w32, FF_DT_F32, 32, 0, 5, &o, m1, NULL, &a1);
        fn(w32, FF_DT_F32, 32, 0, 5, &o, m2, NULL, &a2);
        CHECK(!memcmp(m1, m2, sizeof m1) && a1 == a2);
        nvfp4_mse_search_rows(w16, FF_DT_F16, 32, 0, 5, &o, m1, NULL, &a1);
        fn(w16, FF_DT_F16, 32, 0, 5, &o, m2, NULL, &a2);
        CHECK(!memcmp(m1, m2, sizeof m1) && a1 == a2);
        CHECK(nvfp4_mse_errors_rows(kernels[k], w32, FF_DT_F32, 32, 0, 5, &o, NULL) == -1);
    }
    CHECK(nvfp4_mse_search_by_name("sse") == NULL);
}

/* Bit-equal floats (NaN errors included). */
static int same_bits(const float *a, const float *b, size_t n)
{
    return !memcmp(a, b, n * sizeof *a);
}

/* Each kernel's error of every group at every step, bit for bit the
 * reference's, over every bf16 magnitude: groups [M, 15 probes] for maxima
 * M across binades (subnormal, tiny, weight-like, huge, the bf16 max whose
 * expanded range overflows) and the probes sweeping all |x| <= M, both
 * signs, so every element meets every candidate scale of its M. */
/* The AVX-512 search rounds values below 2^111 to bf16 by Veltkamp's split
 * (t = v (2^16 + 1), t - (t - v)); the same three f32 operations here, on
 * every normal f32 it is used for, against the bit rounding. */
static void test_veltkamp_every_value(void)
{
    uint64_t bad = 0;
    for (uint32_t b = 0x00800000u; b < 0x77000000u; b++) {   /* 2^-126 .. 2^111 */
        float v, t, hi;
        memcpy(&v, &b, sizeof v);
        t = v * 65537.0f;
        hi = t - (t - v);
        bad += hi != ff_round_bf16(v);
    }
    CHECK(bad == 0);
}

/* Every bf16 |d|, zero, subnormals, the identity's edges (2^-52, 2^52) and
 * the values past them that the kernel gathers from the table instead. */
static void test_pow_every_value(void)
{
    int bad = nvfp4_mse_pow_mismatches("avx512-arith");
    if (bad < 0)
        return;   /* no AVX-512 here: the gather-only kernels read the table itself */
    CHECK(bad == 0);
}

static void test_errors_every_value(void)
{
    static const uint16_t maxima[] = {0x0003, 0x0080, 0x3a4b, 0x3c01, 0x3f7f, 0x4321, 0x7f7f};
    const uint64_t cap = 2200;   /* groups a maximum: 15 * 2200 > 32768 */
    uint16_t *w = malloc(cap * 16 * sizeof *w);
    float *ref = malloc(cap * 111 * sizeof *ref), *got = malloc(cap * 111 * sizeof *got);
    CHECK(w && ref && got);
    const char *obs[] = {"mse", "expanded-mse"};
    for (size_t mi = 0; w && ref && got && mi < sizeof maxima / sizeof *maxima; mi++) {
        uint64_t groups = 0;
        for (uint32_t v = 0; v <= maxima[mi]; groups++) {
            w[groups * 16] = maxima[mi];
            for (int i = 1; i < 16; i++, v += v <= maxima[mi] ? 1 : 0)
                w[groups * 16 + i] = (uint16_t)((v <= maxima[mi] ? v : 0) | (i & 1) << 15);
        }
        for (int n = 0; n < 2; n++) {
            nvfp4_obs o;
            nvfp4_obs_from_name(obs[n], &o);
            for (uint64_t g = 0; g < groups; g++) {
                float x[16], amax = ff_bf16_to_f32(maxima[mi]);
                for (int i = 0; i < 16; i++)
                    x[i] = ff_bf16_to_f32(w[g * 16 + i]);
                for (int i = 0; i < o.steps; i++)
                    ref[g * o.steps + i] = ref_group_error(x, nvfp4_mse_candidate(&o, FF_DT_BF16, amax, i));
            }
            for (int k = 0; k < NKERNELS; k++) {
                if (nvfp4_mse_errors_rows(kernels[k], w, FF_DT_BF16, 16, 0, groups, &o, got))
                    continue;
                CHECK(same_bits(ref, got, groups * o.steps));
            }
        }
    }
    free(w);
    free(ref);
    free(got);
}

/* Elements exactly on the decision edges of a candidate scale (y = m_j and
 * its bf16 neighbours), where a rounding off by one ulp would move a code. */
static void test_errors_on_edges(void)
{
    static const float edge[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    nvfp4_obs o;
    nvfp4_obs_from_name("expanded-mse", &o);
    enum { G = 64 };
    uint16_t w[G * 16];
    uint32_t st = 7;
    for (int g = 0; g < G; g++) {
        uint16_t amax = (uint16_t)(0x3f00 + (rnd(&st) & 0xff));
        float A = ff_bf16_to_f32(amax);
        int i = (int)(rnd(&st) % (uint32_t)o.steps);
        float s = ff_round_bf16(nvfp4_mse_candidate(&o, FF_DT_BF16, A, i) / 6.0f);
        w[g * 16] = amax;
        for (int k = 1; k < 16; k++) {
            float y = edge[k % 7] + (float)((int)(k / 7) - 1) * 0x1p-8f * edge[k % 7];
            uint16_t b = ff_f32_to_bf16(y * s);
            w[g * 16 + k] = ff_bf16_to_f32(b) > A ? amax : b;
        }
    }
    float ref[G * 111], got[G * 111];
    for (int g = 0; g < G; g++) {
        float x[16];
        for (int k = 0; k < 16; k++)
            x[k] = ff_bf16_to_f32(w[g * 16 + k]);
        for (int i = 0; i < o.steps; i++)
            ref[g * o.steps + i] = ref_group_error(x, nvfp4_mse_candidate(&o, FF_DT_BF16, fabsf(x[0]), i));
    }
    for (int k = 0; k < NKERNELS; k++)
        if (!nvfp4_mse_errors_rows(kernels[k], w, FF_DT_BF16, 16, 0, G, &o, got))
            CHECK(same_bits(ref, got, (size_t)G * o.steps));
}

/* The vector quantizer with chosen ranges gives the scalar one's bytes:
 * ranges from 0 (scale 0.125) through subnormal e4m3 scales to past the 448
 * clamp, and a row with an infinite range (the scalar path then). */
static void test_ranges_kernels(void)
{
    enum { ROWS = 9, COLS = 80, G = ROWS * COLS / 16 };
    uint16_t w[ROWS * COLS];
    float gamax[G];
    uint32_t st = 99;
    for (int i = 0; i < ROWS * COLS; i++)
        w[i] = rnd_bf(&st, i % 3 ? 0.1f : 2.0f);
    for (int g = 0; g < G; g++) {
        float f = (float)(rnd(&st) % 1000) / 500.0f;
        gamax[g] = g % 7 == 0 ? 0.0f : g % 7 == 1 ? f * 1e-5f : g % 7 == 2 ? f * 300.0f : f;
    }
    float gs = nvfp4_global_scale(1.5f, FF_DT_BF16);
    uint8_t p1[ROWS * COLS / 2], s1[G], p2[ROWS * COLS / 2], s2[G];
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            gamax[5] = INFINITY;
        nvfp4_quantize_rows_ranges_scalar(w, FF_DT_BF16, COLS, 0, ROWS, gs, gamax, p1, s1);
        nvfp4_quantize_rows_ranges(w, FF_DT_BF16, COLS, 0, ROWS, gs, gamax, p2, s2);
        CHECK(!memcmp(p1, p2, sizeof p1));
        CHECK(!memcmp(s1, s2, sizeof s1));
        /* rows 2..4 alone, as one task quantizes them */
        nvfp4_quantize_rows_ranges(w, FF_DT_BF16, COLS, 2, 3, gs, gamax + 2 * (COLS / 16), p2, s2);
        CHECK(!memcmp(p1 + 2 * (COLS / 2), p2, 3 * (COLS / 2)));
        CHECK(!memcmp(s1 + 2 * (COLS / 16), s2, 3 * (COLS / 16)));
    }
#if defined(__x86_64__)
    /* each vector kernel by itself (the dispatch above takes one); finite ranges */
    gamax[5] = 1.0f;
    nvfp4_quantize_rows_ranges_scalar(w, FF_DT_BF16, COLS, 0, ROWS, gs, gamax, p1, s1);
    if (nvfp4_cpu_avx2_ok()) {
        memset(p2, 0, sizeof p2);
        nvfp4_ranges_rows_avx2(w, COLS, 0, ROWS, gs, gamax, p2, s2);
        CHECK(!memcmp(p1, p2, sizeof p1) && !memcmp(s1, s2, sizeof s1));
    }
    if (nvfp4_cpu_avx512_ok()) {
        memset(p2, 0, sizeof p2);
        nvfp4_ranges_rows_avx512(w, COLS, 0, ROWS, gs, gamax, p2, s2);
        CHECK(!memcmp(p1, p2, sizeof p1) && !memcmp(s1, s2, sizeof s1));
    }
#endif
}

/* choose's bf16 maximum (read off the bits) picks the ranges the float
 * maximum does. */
static void test_choose_bf16(void)
{
    static uint16_t w[TROWS * TCOLS];
    fill_cases(w);
    nvfp4_obs o;
    nvfp4_obs_from_name("expanded-mse", &o);
    uint8_t idx[TGROUPS];
    for (int g = 0; g < TGROUPS; g++)
        idx[g] = (uint8_t)(g * 37 % o.steps);
    float got[TGROUPS];
    float top = nvfp4_mse_choose_rows(w, FF_DT_BF16, TCOLS, 0, TROWS, &o, NULL, idx, o.steps - 1, got);
    float want_top = 0.0f;
    for (int g = 0; g < TGROUPS; g++) {
        float amax = 0.0f;
        for (int i = 0; i < 16; i++)
            amax = fabsf(ff_bf16_to_f32(w[g * 16 + i])) > amax ? fabsf(ff_bf16_to_f32(w[g * 16 + i])) : amax;
        float c = nvfp4_mse_candidate(&o, FF_DT_BF16, amax, idx[g]);
        CHECK(same_bits(&c, &got[g], 1));
        want_top = c > want_top ? c : want_top;
    }
    CHECK(same_bits(&top, &want_top, 1));
}

int main(void)
{
    RUN(test_names);
    RUN(test_candidates);
    RUN(test_group_error);
    RUN(test_stop);
    RUN(test_early_stop_group);
    RUN(test_ranges_match_minmax);
    RUN(test_kernels_match_reference);
    RUN(test_kernels_other_dtypes);
    RUN(test_veltkamp_every_value);
    RUN(test_pow_every_value);
    RUN(test_errors_every_value);
    RUN(test_errors_on_edges);
    RUN(test_ranges_kernels);
    RUN(test_choose_bf16);
    return UNIT_END();
}

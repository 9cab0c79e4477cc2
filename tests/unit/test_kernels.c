/* Every kernel this CPU runs must give the scalar kernel's bytes exactly:
 * random groups, and groups built to hit each rounding edge (values exactly
 * on the E2M1 bucket thresholds times eff, zeros, -0.0, subnormals, huge
 * magnitudes, e4m3 subnormal scales), for BF16, F16 and F32 input. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "nvfp4.h"
#include "nvfp4_simd.h"
#include "nvfp4_thresh.h"
#include "unit.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float unit_rand(void) { return (float)(next_u32() & 0xffffff) / 16777216.0f; }

/* Stores f into element i of a buffer of dtype t (rounding as torch would). */
static void put(void *buf, ff_dtype t, size_t i, float f)
{
    if (t == FF_DT_BF16)
        ((uint16_t *)buf)[i] = ff_f32_to_bf16(f);
    else if (t == FF_DT_F16)
        ((uint16_t *)buf)[i] = ff_f32_to_f16(f);
    else
        ((float *)buf)[i] = f;
}

/* A group whose elements are exact bucket edges of eff, with eff from the
 * scalar path; a few tweaks around it give the one-ulp neighbours. */
static const float k_edges[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f,
                                2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f};

static void fill_group(void *buf, ff_dtype t, size_t base, int kind)
{
    float mag = ldexpf(1.0f, (int)(next_u32() % 40) - 20);
    for (int i = 0; i < NVFP4_GROUP; i++) {
        float v;
        switch (kind) {
        case 0: v = (unit_rand() * 2 - 1) * mag; break;                         /* random */
        case 1: v = 0.0f; break;                                                /* all zero */
        case 2: v = (i & 1) ? -0.0f : 0.0f; break;                              /* signed zeros */
        case 3: v = k_edges[i % 15] * (i & 1 ? -1 : 1) * (i == 0 ? 6.0f : 1.0f); break;
        case 4: v = ldexpf(unit_rand(), -130 - (int)(next_u32() % 20)); break;   /* f32 subnormal */
        case 5: v = ldexpf(unit_rand() - 0.5f, -14 - (int)(next_u32() % 12)); break; /* f16 subnormal */
        case 6: v = (unit_rand() * 2 - 1) * 3.0e38f; break;                      /* huge */
        case 7: v = (i == 3) ? mag : -1e-30f * mag; break;                      /* -tiny -> code 8 */
        case 8: v = k_edges[next_u32() % 15] * mag / 6.0f * (next_u32() & 1 ? -1 : 1); break;
        default: {
            union { uint32_t u; float f; } b = {.u = next_u32() & 0x7f7fffffu}; /* any finite bits */
            v = (next_u32() & 1) ? -b.f : b.f;
        }
        }
        if (t == FF_DT_F16 && fabsf(v) > 65504.0f)
            v = copysignf(65504.0f, v);
        put(buf, t, base + (size_t)i, v);
    }
}

static int run_case(nvfp4_rows_fn fn, ff_dtype t, uint64_t rows, uint64_t cols, int kind_mode)
{
    size_t esz = ff_dtype_size(t), n = rows * cols;
    uint8_t *w = malloc(n * esz);
    for (size_t g = 0; g < n / NVFP4_GROUP; g++)
        fill_group(w, t, g * NVFP4_GROUP, kind_mode >= 0 ? kind_mode : (int)(next_u32() % 10));
    float amax;
    uint64_t bad;
    int ok = 1;
    if (nvfp4_absmax(w, t, n, &amax, &bad)) {
        free(w);
        return 1;
    }
    float fast_amax;
    CHECK(nvfp4_absmax_fast(w, t, n, &fast_amax, &bad) == 0 && fast_amax == amax);
    /* the tensor's own scale, and odd ones that push s8 into e4m3
     * subnormals, to the 448 clamp, and through the 0 -> 0.125 rule */
    float gss[] = {nvfp4_global_scale(amax, t), 1.0f, 1e-3f, 3.7e5f, 1e30f, 0x1p-20f};
    for (size_t k = 0; k < sizeof gss / sizeof *gss && ok; k++) {
        size_t pb = n / 2, sb = n / NVFP4_GROUP;
        uint8_t *p0 = malloc(pb), *s0 = malloc(sb), *p1 = malloc(pb), *s1 = malloc(sb);
        nvfp4_quantize_rows_scalar(w, t, cols, 0, rows, gss[k], p0, s0);
        /* call on a row window too, to test row0 handling */
        fn(w, t, cols, 0, rows / 2, gss[k], p1, s1);
        fn(w, t, cols, rows / 2, rows - rows / 2, gss[k], p1 + (rows / 2) * cols / 2,
           s1 + (rows / 2) * (cols / NVFP4_GROUP));
        if (memcmp(p0, p1, pb) || memcmp(s0, s1, sb)) {
            for (size_t i = 0; i < pb; i++)
                if (p0[i] != p1[i]) {
                    fprintf(stderr, "  %s kind %d gs %g: packed byte %zu: %02x != %02x\n", ff_dtype_name(t),
                            kind_mode, gss[k], i, p1[i], p0[i]);
                    break;
                }
            for (size_t i = 0; i < sb; i++)
                if (s0[i] != s1[i]) {
                    fprintf(stderr, "  %s kind %d gs %g: scale %zu: %02x != %02x\n", ff_dtype_name(t),
                            kind_mode, gss[k], i, s1[i], s0[i]);
                    break;
                }
            ok = 0;
        }
        free(p0), free(s0), free(p1), free(s1);
    }
    free(w);
    return ok;
}

static void check_kernel(const char *name)
{
    nvfp4_rows_fn fn = nvfp4_kernel_by_name(name);
    if (!fn) {
        printf("SKIP kernel_%s (CPU lacks it)\n", name);
        return;
    }
    static const ff_dtype types[] = {FF_DT_BF16, FF_DT_F16, FF_DT_F32};
    /* widths: one group, a partial vector block, several full blocks + tail;
     * 41 and 80 groups: the bf16 kernel's 24-group chunks, whole, short and
     * followed by a partial block; 120 groups: a 64-group chunk of the
     * AVX-512 threshold codes, then 56 (three 16-group steps and an 8) */
    static const uint64_t widths[] = {16, 48, 112, 256, 272, 656, 1280, 1920, 5376};
    for (size_t ti = 0; ti < 3; ti++)
        for (int kind = -1; kind < 10; kind++)
            for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
                for (int rep = 0; rep < (kind < 0 ? 20 : 3); rep++)
                    CHECK(run_case(fn, types[ti], 6, widths[wi], kind));
}

/* Every bf16 bit pattern (Inf and NaN too) as a group element next to a
 * fixed max, so every possible y lands against every threshold. */
static void check_all_bf16(const char *name)
{
    nvfp4_rows_fn fn = nvfp4_kernel_by_name(name);
    if (!fn)
        return;
    size_t n = 65536 / 8 * NVFP4_GROUP;
    uint16_t *w = calloc(n, 2);
    size_t k = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        size_t g = k / 8, i = k % 8;
        w[g * 16 + i] = (uint16_t)b;
        w[g * 16 + 8 + i] = (uint16_t)(0x3f80 + (g % 64) * 3);  /* maxima */
        k++;
    }
    uint8_t *p0 = malloc(n / 2), *s0 = malloc(n / 16), *p1 = malloc(n / 2), *s1 = malloc(n / 16);
    float gss[] = {1.0f, 448.0f, 2688.0f / 3.0f, 0.01f};
    for (size_t j = 0; j < 4; j++) {
        nvfp4_quantize_rows_scalar(w, FF_DT_BF16, n, 0, 1, gss[j], p0, s0);
        fn(w, FF_DT_BF16, n, 0, 1, gss[j], p1, s1);
        CHECK(memcmp(p0, p1, n / 2) == 0 && memcmp(s0, s1, n / 16) == 0);
    }
    free(w), free(p0), free(s0), free(p1), free(s1);
}

/* The edges a table holds must be exactly where the scalar kernel's code
 * changes: for every scale code and every |x| bit pattern (NaN included),
 * the edges passed are the bucket and the sign edge is "x / eff != 0". The
 * global scales reach e4m3 subnormal and clamped codes, and tiny and huge
 * eff (where the first guess underflows or lands far from the edge). */
static void thresholds_match_scalar(void)
{
    static const float gss[] = {1.0f, 448.0f, 2688.0f / 3.0f, 0.01f, 1e30f, 1e-30f, 3.7e5f, 0x1p-20f};
    nvfp4_thr_table *tt = malloc(sizeof *tt);
    for (size_t j = 0; j < sizeof gss / sizeof *gss; j++) {
        nvfp4_thr_init(tt, gss[j]);
        int bad = 0;
        for (int code = 1; code <= 0x7e && !bad; code++) {
            int32_t c = code;
            nvfp4_thr_build_codes(tt, &c, 1);
            float eff = ff_e4m3_to_f32((uint8_t)code) / gss[j];
            const nvfp4_thr *e = &tt->code[code];
            for (uint32_t mag = 0; mag < 0x8000 && !bad; mag++) {
                float y = ff_bf16_to_f32((uint16_t)mag) / eff;
                int passed = 0;
                for (int k = 0; k < 7; k++)
                    passed += (int32_t)mag > (e->edge[k] & 0xffff);
                int nonzero = (int32_t)mag > (e->edge[7] & 0xffff);
                int want_nonzero = mag <= 0x7f80 && (nvfp4_fp4_code(-y) & 8) != 0;
                if (passed != (nvfp4_fp4_code(y) & 7) || (mag <= 0x7f80 && nonzero != want_nonzero)) {
                    fprintf(stderr, "  gs %g code %02x mag %04x: passed %d nonzero %d\n", gss[j], code, mag, passed,
                            nonzero);
                    bad = 1;
                }
            }
        }
        CHECK(!bad);
    }
    free(tt);
}

static void kernel_avx2(void)
{
    check_kernel("avx2");
    check_all_bf16("avx2");
}

static void kernel_avx512(void)
{
    check_kernel("avx512");
    check_all_bf16("avx512");
}

/* A scale first met in a chunk's last eight groups, after sixteen-group
 * steps that met only known scales: those eight alone must have its edges
 * built. Rows of 40 groups (two 16-group steps and an 8 at 512 bits, five
 * 8-group steps at 256): every group at one magnitude but the last row's
 * last eight, at another. */
static void new_scale_in_chunk_tail(void)
{
    const char *names[] = {"avx2", "avx512"};
    enum { ROWS = 4, COLS = 640 };
    static uint16_t w[ROWS * COLS];
    static uint8_t p0[ROWS * COLS / 2], s0[ROWS * COLS / 16], p1[ROWS * COLS / 2], s1[ROWS * COLS / 16];
    for (size_t i = 0; i < ROWS * COLS; i++) {
        float mag = i >= ROWS * COLS - 8 * NVFP4_GROUP ? 0.01f : 1.0f;
        w[i] = ff_f32_to_bf16((unit_rand() * 2 - 1) * mag);
    }
    float amax;
    uint64_t bad;
    nvfp4_absmax(w, FF_DT_BF16, ROWS * COLS, &amax, &bad);
    float gs = nvfp4_global_scale(amax, FF_DT_BF16);
    nvfp4_quantize_rows_scalar(w, FF_DT_BF16, COLS, 0, ROWS, gs, p0, s0);
    for (int k = 0; k < 2; k++) {
        nvfp4_rows_fn fn = nvfp4_kernel_by_name(names[k]);
        if (!fn)
            continue;
        fn(w, FF_DT_BF16, COLS, 0, ROWS, gs, p1, s1);
        CHECK(!memcmp(p0, p1, sizeof p0) && !memcmp(s0, s1, sizeof s0));
    }
}

static void kernel_best_is_known(void)
{
    const char *name = NULL;
    nvfp4_rows_fn fn = nvfp4_best_kernel(&name);
    CHECK(fn != NULL && name != NULL);
    CHECK(nvfp4_kernel_by_name("scalar") == nvfp4_quantize_rows_scalar);
    CHECK(nvfp4_kernel_by_name("nope") == NULL);
}

/* The fast absmax must report the same first bad index as the scalar. */
static void absmax_fast_reports_nan(void)
{
    uint16_t w[100] = {0};
    w[70] = 0x7fc0;
    w[90] = 0x7f80;
    float a;
    uint64_t bad = 0;
    CHECK(nvfp4_absmax_fast(w, FF_DT_BF16, 100, &a, &bad) == 1 && bad == 70);
    w[70] = 0xc000;
    CHECK(nvfp4_absmax_fast(w, FF_DT_BF16, 100, &a, &bad) == 1 && bad == 90);
    w[90] = 0;
    CHECK(nvfp4_absmax_fast(w, FF_DT_BF16, 100, &a, &bad) == 0 && a == 2.0f);
}

/* The kernel that reads another tensor along (nvfp4_quantize_rows_side)
 * gives the scalar kernel's bytes, and the side's max |x| bits whatever
 * its length against the rows' (none, less than a vector, more than the
 * rows, a NaN or Inf among them). */
static void side_kernel_matches(void)
{
    if (!nvfp4_side_ok(nvfp4_kernel_by_name("avx2"))) {
        printf("SKIP side_kernel_matches (no side path on this CPU)\n");
        return;
    }
    static const uint64_t widths[] = {16, 112, 656, 1280, 5376}, rowss[] = {1, 6, 64};
    static const uint64_t sides[] = {0, 7, 16, 100, 4099, 100000};
    for (size_t wi = 0; wi < 5; wi++)
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t si = 0; si < 6; si++) {
                uint64_t cols = widths[wi], rows = rowss[ri], n = rows * cols, sn = sides[si];
                uint16_t *w = malloc(n * 2), *side = malloc((sn ? sn : 1) * 2);
                for (size_t g = 0; g < n / NVFP4_GROUP; g++)
                    fill_group(w, FF_DT_BF16, g * NVFP4_GROUP, (int)(next_u32() % 10));
                uint16_t want = 0;
                for (uint64_t i = 0; i < sn; i++) {
                    side[i] = (uint16_t)next_u32();
                    if (si % 2 == 0 && (side[i] & 0x7f80) == 0x7f80)
                        side[i] &= 0xbfff;   /* even cases finite, odd ones as drawn */
                    uint16_t a = side[i] & 0x7fff;
                    want = a > want ? a : want;
                }
                float amax, gs;
                uint64_t bad;
                gs = nvfp4_absmax(w, FF_DT_BF16, n, &amax, &bad) ? 1.0f : nvfp4_global_scale(amax, FF_DT_BF16);
                uint8_t *p0 = malloc(n / 2), *s0 = malloc(n / 16), *p1 = malloc(n / 2), *s1 = malloc(n / 16);
                nvfp4_quantize_rows_scalar(w, FF_DT_BF16, cols, 0, rows, gs, p0, s0);
                uint64_t half = rows / 2;
                for (int ki = 0; ki < 2; ki++) {
                    nvfp4_rows_fn k = nvfp4_kernel_by_name(ki ? "avx512" : "avx2");
                    if (!k)
                        continue;
                    nvfp4_side a = {.p = side, .n = sn / 3}, b = {.p = side + sn / 3, .n = sn - sn / 3};
                    memset(p1, 0, n / 2), memset(s1, 0, n / 16);
                    nvfp4_quantize_rows_side(k, w, cols, 0, half, gs, p1, s1, &a);
                    nvfp4_quantize_rows_side(k, w, cols, half, rows - half, gs, p1 + half * cols / 2,
                                             s1 + half * cols / 16, &b);
                    CHECK(memcmp(p0, p1, n / 2) == 0 && memcmp(s0, s1, n / 16) == 0);
                    CHECK((a.max > b.max ? a.max : b.max) == want);
                }
                free(w), free(side), free(p0), free(s0), free(p1), free(s1);
            }
}

int main(void)
{
    RUN(kernel_best_is_known);
    RUN(thresholds_match_scalar);
    RUN(kernel_avx2);
    RUN(kernel_avx512);
    RUN(new_scale_in_chunk_tail);
    RUN(absmax_fast_reports_nan);
    RUN(side_kernel_matches);
    return UNIT_END();
}

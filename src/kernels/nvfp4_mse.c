#include "nvfp4_mse.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "nvfp4.h"
#include "nvfp4_mse_simd.h"
#include "nvfp4_simd.h"

int nvfp4_obs_from_name(const char *name, nvfp4_obs *o)
{
    memset(o, 0, sizeof *o);
    if (!strcmp(name, "minmax") || !strcmp(name, "memoryless_minmax")) {
        o->kind = NVFP4_OBS_MINMAX;
        o->llmc_name = "memoryless_minmax";
        return 0;
    }
    /* MemorylessMSEObserver / MovingAverageMSEObserver defaults (mse.py); the
     * moving average never applies to a weight (observed once). */
    o->maxshrink = 0.20;
    o->patience = 5;
    o->grid = 100.0;
    o->norm = 2.4;
    o->expand = 1.0;
    if (!strcmp(name, "mse") || !strcmp(name, "memoryless_mse")) {
        o->kind = NVFP4_OBS_MSE;
        o->llmc_name = "memoryless_mse";
    } else if (!strcmp(name, "expanded-mse") || !strcmp(name, "expanded_mse") ||
               !strcmp(name, "nvfp4_expanded_mse") || !strcmp(name, "fouroversix")) {
        /* NVFP4ExpandedMSEObserver: 1.8x down to 0.8x of max|x| */
        o->kind = NVFP4_OBS_EXPANDED_MSE;
        o->llmc_name = "nvfp4_expanded_mse";
        o->expand = 1.8;
        o->maxshrink = 1 - 0.8 / 1.8;
        o->grid = 200.0;
        o->patience = 1000;
    } else {
        return -1;
    }
    o->steps = (int)(o->maxshrink * o->grid);   /* python int(): truncation */
    return 0;
}

int nvfp4_obs_needs_mask(const nvfp4_obs *o)
{
    return o->patience < o->steps;
}

/* |d|^norm as torch computes Tensor.pow(python float) for a 16-bit tensor: the
 * exponent is first rounded to the tensor's dtype (2.4 -> 2.40625 in bf16),
 * the power taken in float, the result rounded back. A 16-bit |d| has at most
 * 32768 values, so a table does it exactly (checked against torch over all of
 * them). */
static float pow_bf16[0x8000], pow_f16[0x8000];
static float pow_frac[32], pow_mant[128];   /* nvfp4_mse_plan says why */
/* every observer llm-compressor registers defaults to norm 2.4; other norms
 * (none reachable from the CLI) fall back to powf */
static const double pow_norm_tab = 2.4;
static pthread_once_t pow_once = PTHREAD_ONCE_INIT;

static void pow_init(void)
{
    float e_bf = ff_round_to(FF_DT_BF16, (float)pow_norm_tab);
    float e_h = ff_round_to(FF_DT_F16, (float)pow_norm_tab);
    for (uint32_t i = 0; i < 0x8000; i++) {
        float v = ff_bf16_to_f32((uint16_t)i);
        pow_bf16[i] = ff_round_bf16((float)pow((double)v, (double)e_bf));
        float h = ff_f16_to_f32((uint16_t)i);
        pow_f16[i] = ff_round_to(FF_DT_F16, (float)pow((double)h, (double)e_h));
    }
    for (int j = 0; j < 32; j++) {
        int t = 77 * (j - 127);   /* 2.40625 = 77/32 */
        pow_frac[j] = (float)exp2((double)(((t % 32) + 32) % 32) / 32.0);
    }
    for (int m = 0; m < 128; m++)
        pow_mant[m] = (float)pow(1.0 + m / 128.0, (double)e_bf);
}

static inline float pow_t(float a, ff_dtype t, float norm)
{
    if (norm != (float)pow_norm_tab)
        return ff_round_to(t, powf(a, ff_round_to(t, norm)));
    switch (t) {
    case FF_DT_BF16: return pow_bf16[ff_f32_to_bf16(a) & 0x7fff];
    case FF_DT_F16: return pow_f16[ff_f32_to_f16(a) & 0x7fff];
    default: return powf(a, norm);
    }
}

static float dtype_eps(ff_dtype t)
{
    switch (t) {
    case FF_DT_BF16: return 0x1p-7f;
    case FF_DT_F16: return 0x1p-10f;
    default: return FLT_EPSILON;
    }
}

static float dtype_max(ff_dtype t)
{
    switch (t) {
    case FF_DT_BF16: return ff_bf16_to_f32(0x7f7f);
    case FF_DT_F16: return 65504.0f;
    default: return FLT_MAX;
    }
}

float nvfp4_mse_candidate(const nvfp4_obs *o, ff_dtype t, float amax, int i)
{
    /* min_val * expand: a python float scalar reaches the bf16 kernel as f32
     * (opmath), the product is rounded to the dtype; same for * p. */
    float a = ff_round_to(t, amax * (float)o->expand);
    float p = (float)(1.0 - (double)i / o->grid);
    return ff_round_to(t, a * p);
}

float nvfp4_mse_group_error(const float *x, float c, ff_dtype t, const nvfp4_obs *o)
{
    pthread_once(&pow_once, pow_init);
    /* calculate_qparams(global_scale=None, scale_dtype=None): scale =
     * max_val_pos / (bit_range.to(dtype) / 2) = c / 6 in the dtype; a zero
     * scale becomes finfo(dtype).eps */
    float s = ff_round_to(t, c / NVFP4_FP4_MAX);
    if (s == 0.0f)
        s = dtype_eps(t);
    float norm = (float)o->norm, acc = 0.0f;
    for (int i = 0; i < NVFP4_GROUP; i++) {
        /* _quantize_dequantize: x / scale, clamp, cast_to_fp4, * scale, each
         * op rounded to the dtype; then (q - x).abs().pow(norm), summed in
         * f32 (torch's reduction accumulates 16 bf16 values in float) */
        float y = ff_round_to(t, x[i] / s);
        float q = nvfp4_code_value[nvfp4_fp4_code(y)];
        float d = ff_round_to(t, q * s);
        float diff = ff_round_to(t, d - x[i]);
        acc += pow_t(fabsf(diff), t, norm);
    }
    return ff_round_to(t, acc);
}

static void load_group(const void *w, ff_dtype t, uint64_t base, float *x)
{
    for (int i = 0; i < NVFP4_GROUP; i++)
        x[i] = ff_load_f32(w, t, base + (uint64_t)i);
}

static float group_absmax(const float *x)
{
    float m = 0.0f;
    for (int i = 0; i < NVFP4_GROUP; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

/* One search's plan for the vector kernels, or -1 when they do not take it
 * (not bf16, another norm than the table's, more steps than idx holds). */
static int mse_plan(const nvfp4_obs *o, ff_dtype t, nvfp4_mse_plan *pl)
{
    if (t != FF_DT_BF16 || (float)o->norm != (float)pow_norm_tab || o->steps > NVFP4_MSE_MAX_STEPS)
        return -1;
    pthread_once(&pow_once, pow_init);
    pl->pow = pow_bf16;
    pl->pow_frac = pow_frac;
    pl->pow_mant = pow_mant;
    for (int i = 0; i < o->steps; i++)
        pl->p[i] = (float)(1.0 - (double)i / o->grid);   /* as nvfp4_mse_candidate */
    pl->expand = (float)o->expand;
    pl->steps = o->steps;
    pl->use_mask = nvfp4_obs_needs_mask(o);
    return 0;
}

#if defined(__x86_64__)
/* The AVX-512 search computes the power where that beats the gather: on AMD
 * (Zen 5: 1.8x, 0.585 -> 0.324 ns a group-element-step), not on Intel (the
 * H200 host's Xeon: 0.35 -> 0.50-0.54 ns, its gathers being fast and its
 * permutes on one port). There the gather form is 40efd01's kernel: with
 * pair compares and Veltkamp roundings around the same gather, the H100
 * host's Xeon took 0.66-0.71 ns against 0.50-0.51 (expanded-mse).
 * docs/observers.md has the measurements. */
static int avx512_arith_pays(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
}
#endif

/* "avx512" names the CPU's faster of "avx512-gather" and "avx512-arith"
 * (the same bytes; tests and bench-mse name them), decided here once a
 * lookup so the kernels and the search table know only the two forms */
static const char *concrete_kernel(const char *name)
{
#if defined(__x86_64__)
    if (!strcmp(name, "avx512"))
        return avx512_arith_pays() ? "avx512-arith" : "avx512-gather";
#endif
    return name;
}

static nvfp4_mse_groups_fn groups_kernel(const char *name)
{
    name = concrete_kernel(name);
#if defined(__x86_64__)
    if (!strcmp(name, "avx512-gather") && nvfp4_cpu_avx512_ok())
        return nvfp4_mse_groups_avx512;
    if (!strcmp(name, "avx512-arith") && nvfp4_cpu_avx512_ok())
        return nvfp4_mse_groups_avx512_arith;
    if (!strcmp(name, "avx2") && nvfp4_cpu_avx2_ok())
        return nvfp4_mse_groups_avx2;
#endif
    return NULL;
}

/* rows are whole 16-groups, so the block of rows is cols/16 * nrows groups */
static void search_with(nvfp4_mse_groups_fn k, const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                        uint64_t nrows, const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    nvfp4_mse_plan pl;
    if (!k || mse_plan(o, t, &pl)) {
        nvfp4_mse_search_rows(w, t, cols, row0, nrows, o, mask, idx, any);
        return;
    }
    uint64_t acc_any = 0;
    k((const uint16_t *)w + row0 * cols, nrows * (cols / NVFP4_GROUP), &pl, mask, idx, &acc_any, NULL);
    if (any)
        *any |= acc_any;
}

static void search_avx2(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                        const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    search_with(groups_kernel("avx2"), w, t, cols, row0, nrows, o, mask, idx, any);
}

static void search_avx512_gather(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                 const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    search_with(groups_kernel("avx512-gather"), w, t, cols, row0, nrows, o, mask, idx, any);
}

static void search_avx512_arith(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    search_with(groups_kernel("avx512-arith"), w, t, cols, row0, nrows, o, mask, idx, any);
}

nvfp4_mse_search_fn nvfp4_mse_search_by_name(const char *name)
{
    static const struct {
        const char *name;
        nvfp4_mse_search_fn fn;
    } searches[] = {{"avx2", search_avx2},
                    {"avx512-gather", search_avx512_gather},
                    {"avx512-arith", search_avx512_arith}};
    if (!strcmp(name, "scalar"))
        return nvfp4_mse_search_rows;
    name = concrete_kernel(name);
    for (size_t i = 0; i < sizeof searches / sizeof *searches; i++)
        if (!strcmp(name, searches[i].name))
            return groups_kernel(name) ? searches[i].fn : NULL;
    return NULL;
}

void nvfp4_mse_search_rows_simd(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    nvfp4_mse_groups_fn k = groups_kernel("avx512");
    search_with(k ? k : groups_kernel("avx2"), w, t, cols, row0, nrows, o, mask, idx, any);
}

int nvfp4_mse_pow_mismatches(const char *name)
{
    nvfp4_obs o;
    nvfp4_mse_plan pl;
    if (nvfp4_obs_from_name("mse", &o) || mse_plan(&o, FF_DT_BF16, &pl))
        return -1;
#if defined(__x86_64__)
    if (!strcmp(name, "avx512-arith") && nvfp4_cpu_avx512_ok())
        return nvfp4_mse_pow_mismatches_avx512(&pl);
#endif
    (void)name;
    return -1;
}

int nvfp4_mse_errors_rows(const char *name, const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                          uint64_t nrows, const nvfp4_obs *o, float *err)
{
    uint64_t groups = nrows * (cols / NVFP4_GROUP);
    if (!strcmp(name, "scalar")) {
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP];
            load_group(w, t, row0 * cols + g * NVFP4_GROUP, x);
            float amax = group_absmax(x);
            for (int i = 0; i < o->steps; i++)
                err[g * (uint64_t)o->steps + (uint64_t)i] =
                    nvfp4_mse_group_error(x, nvfp4_mse_candidate(o, t, amax, i), t, o);
        }
        return 0;
    }
    nvfp4_mse_groups_fn k = groups_kernel(name);
    nvfp4_mse_plan pl;
    if (!k || mse_plan(o, t, &pl))
        return -1;
    k((const uint16_t *)w + row0 * cols, groups, &pl, NULL, NULL, NULL, err);
    return 0;
}

void nvfp4_mse_search_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                           const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any)
{
    uint64_t groups = cols / NVFP4_GROUP, acc_any = 0;
    int use_mask = nvfp4_obs_needs_mask(o);
    float top = dtype_max(t);
    for (uint64_t r = 0; r < nrows; r++) {
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP];
            load_group(w, t, (row0 + r) * cols + g * NVFP4_GROUP, x);
            float amax = group_absmax(x);
            float best = top;
            uint64_t m = 0;
            int bi = 0;
            for (int i = 0; i < o->steps; i++) {
                float err = nvfp4_mse_group_error(x, nvfp4_mse_candidate(o, t, amax, i), t, o);
                if (err < best) {
                    best = err;
                    bi = i;
                    if (i < 64)
                        m |= 1ull << i;
                }
            }
            if (use_mask) {
                mask[r * groups + g] = m;
                acc_any |= m;
            } else {
                idx[r * groups + g] = (uint8_t)bi;
            }
        }
    }
    if (any)
        *any |= acc_any;
}

int nvfp4_mse_stop_step(const nvfp4_obs *o, uint64_t any)
{
    int no_improve = 0;
    for (int i = 0; i < o->steps; i++) {
        if (i < 64 && (any >> i & 1)) {
            no_improve = 0;
        } else if (++no_improve >= o->patience) {
            return i;
        }
    }
    return o->steps - 1;
}

/* max|x| of the group at element base: bf16 from its bits (|bf16| orders
 * as them; NaN bits count as 0, as the float loop's `a > m` skips NaN) */
static float group_absmax_at(const void *w, ff_dtype t, uint64_t base)
{
    if (t != FF_DT_BF16) {
        float x[NVFP4_GROUP];
        load_group(w, t, base, x);
        return group_absmax(x);
    }
    const unsigned char *b = (const unsigned char *)w + 2 * base;
    uint16_t m = 0;
    for (int i = 0; i < NVFP4_GROUP; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        h &= 0x7fff;
        h = h > 0x7f80 ? 0 : h;
        m = h > m ? h : m;
    }
    return ff_bf16_to_f32(m);
}

float nvfp4_mse_choose_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                            const nvfp4_obs *o, const uint64_t *mask, const uint8_t *idx, int stop,
                            float *gamax)
{
    uint64_t groups = cols / NVFP4_GROUP;
    uint64_t lim = stop >= 63 ? ~0ull : (2ull << stop) - 1;
    float top = 0.0f;
    for (uint64_t r = 0; r < nrows; r++)
        for (uint64_t g = 0; g < groups; g++) {
            int i = 0;
            if (mask) {
                uint64_t m = mask[r * groups + g] & lim;
                i = m ? 63 - __builtin_clzll(m) : 0;   /* the last improvement */
            } else {
                i = idx[r * groups + g];
            }
            float c = nvfp4_mse_candidate(o, t, group_absmax_at(w, t, (row0 + r) * cols + g * NVFP4_GROUP), i);
            gamax[r * groups + g] = c;
            top = c > top ? c : top;
        }
    return top;
}

void nvfp4_quantize_rows_ranges_scalar(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                       float gs, const float *gamax, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t r = 0; r < nrows; r++) {
        uint64_t base = (row0 + r) * cols;
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP];
            load_group(w, t, base + g * NVFP4_GROUP, x);
            float s8f;
            scales[r * groups + g] = nvfp4_group_scale(gamax[r * groups + g], gs, t, &s8f);
            float eff = s8f / gs;
            uint8_t *out = packed + r * (cols / 2) + g * (NVFP4_GROUP / 2);
            for (int i = 0; i < NVFP4_GROUP; i += 2) {
                uint8_t lo = nvfp4_fp4_code(x[i] / eff);
                uint8_t hi = nvfp4_fp4_code(x[i + 1] / eff);
                out[i / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

/* The vector kernels assume what a search gives: finite ranges and a finite
 * positive global scale (a range of inf, from max|x| * 1.8 overflowing, makes
 * the scalar kernel's NaN scale, which min_ps would not copy). */
static int ranges_vector_ok(float gs, const float *gamax, uint64_t n)
{
    if (!(gs > 0.0f && gs <= FLT_MAX))
        return 0;
    for (uint64_t i = 0; i < n; i++)
        if (!(gamax[i] <= FLT_MAX))
            return 0;
    return 1;
}

void nvfp4_quantize_rows_ranges(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                float gs, const float *gamax, uint8_t *packed, uint8_t *scales)
{
#if defined(__x86_64__)
    if (t == FF_DT_BF16 && ranges_vector_ok(gs, gamax, nrows * (cols / NVFP4_GROUP))) {
        if (nvfp4_cpu_avx512_ok()) {
            nvfp4_ranges_rows_avx512(w, cols, row0, nrows, gs, gamax, packed, scales);
            return;
        }
        if (nvfp4_cpu_avx2_ok()) {
            nvfp4_ranges_rows_avx2(w, cols, row0, nrows, gs, gamax, packed, scales);
            return;
        }
    }
#endif
    nvfp4_quantize_rows_ranges_scalar(w, t, cols, row0, nrows, gs, gamax, packed, scales);
}

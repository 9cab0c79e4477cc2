/* llm-compressor 0.14's grid-search weight observers for NVFP4 (memoryless_mse,
 * mse, nvfp4_expanded_mse), bit for bit as its eager CPU path computes them
 * (observers/mse_quant.py _grid_search_mse with compressed-tensors'
 * calculate_qparams / fake_quantize, in the weight's dtype). See
 * docs/observers.md for the arithmetic step by step.
 *
 * Per 16-group with range A = round_t(max|x| * expand): candidates
 * c_i = round_t(A * (float)(1 - i/grid)), i < int(maxshrink * grid); each is
 * scored by err_i = round_t(sum_f32 round_t(|round_t(fq(x) - x)|^norm_t)) where
 * fq fake-quantizes with the unrounded local scale round_t(c_i / 6) (no global
 * scale, no fp8 rounding); a candidate wins on err_i < best (strict, so ties
 * keep the wider range). The search stops for the whole TENSOR when no group
 * improved in `patience` consecutive steps. The chosen ranges then replace
 * max|x| everywhere min/max used it: the global scale comes from their max
 * over the fused group, the fp8 scale from each. The vector searches
 * (nvfp4_mse_simd.h) reproduce every rounding of this arithmetic. */
#ifndef FF_NVFP4_MSE_H
#define FF_NVFP4_MSE_H

#include <stdint.h>

#include "dtype.h"

typedef enum {
    NVFP4_OBS_MINMAX = 0,        /* memoryless_minmax: today's bytes */
    NVFP4_OBS_MSE,               /* memoryless_mse (llmc "mse" is the same for weights) */
    NVFP4_OBS_EXPANDED_MSE,      /* nvfp4_expanded_mse (alias fouroversix) */
} nvfp4_obs_kind;

typedef struct nvfp4_obs {
    nvfp4_obs_kind kind;
    const char *llmc_name;       /* what quantization_config records */
    double maxshrink, grid, norm, expand;
    int patience;
    int steps;                   /* int(maxshrink * grid) */
} nvfp4_obs;

/* Fills *o with llm-compressor's defaults for NAME: minmax, memoryless_minmax,
 * mse, memoryless_mse, expanded-mse, expanded_mse, nvfp4_expanded_mse,
 * fouroversix. Returns 0, or -1 for an unknown name. */
int nvfp4_obs_from_name(const char *name, nvfp4_obs *o);

/* The search needs per-group improvement masks when the tensor-wide early
 * stop can fire before the last step (steps <= 64 then). */
int nvfp4_obs_needs_mask(const nvfp4_obs *o);

/* Searches rows [row0, row0+nrows) of a [rows, cols] matrix. With a mask
 * (nvfp4_obs_needs_mask): mask[g] gets bit i set when step i improved group g,
 * *any |= the OR of those masks. Otherwise idx[g] = the winning step. Both
 * outputs are indexed from row0 (cols/16 per row). This is the scalar search,
 * the one every other kernel is checked against. */
void nvfp4_mse_search_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                           const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any);

/* A search kernel: nvfp4_mse_search_rows' contract and its exact results. */
typedef void (*nvfp4_mse_search_fn)(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                    const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any);

/* The search of --kernel NAME ("scalar", "avx2", "avx512"; also
 * "avx512-gather" and "avx512-arith", the two ways the AVX-512 search takes
 * the power, of which "avx512" runs the CPU's faster), NULL if unknown
 * or this CPU lacks it. The vector kernels take bf16 with norm 2.4 (every
 * registered observer) and hand anything else to the scalar search. */
nvfp4_mse_search_fn nvfp4_mse_search_by_name(const char *name);

/* The fastest search this CPU runs (AVX-512, else AVX2, else scalar). */
void nvfp4_mse_search_rows_simd(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, uint64_t *any);

/* Tests: err[g * steps + i] = group g's rounded error at step i, as kernel
 * NAME computes it (scalar: nvfp4_mse_group_error). Returns 0, or -1 when
 * NAME is unknown or unsupported or the input is not what it searches. */
int nvfp4_mse_errors_rows(const char *name, const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                          uint64_t nrows, const nvfp4_obs *o, float *err);

/* Tests: how many of the 32,768 bf16 |d| the power of kernel NAME gets other
 * than the exact table (only "avx512-arith" computes it); -1 when NAME does
 * not compute it or this CPU lacks it. */
int nvfp4_mse_pow_mismatches(const char *name);

/* The step the tensor-wide early stop ends at (inclusive), given the OR of
 * every group's improvement mask: llm-compressor's no_improve_count loop. */
int nvfp4_mse_stop_step(const nvfp4_obs *o, uint64_t any);

/* Turns masks (cut at stop) or indices into each group's chosen range
 * (gamax, indexed from row0); returns their max. */
float nvfp4_mse_choose_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                            const nvfp4_obs *o, const uint64_t *mask, const uint8_t *idx, int stop,
                            float *gamax);

/* Candidate range of step i for a group whose max|x| is amax. */
float nvfp4_mse_candidate(const nvfp4_obs *o, ff_dtype t, float amax, int i);

/* The search's error of one group for candidate range c (exposed for tests). */
float nvfp4_mse_group_error(const float *x, float c, ff_dtype t, const nvfp4_obs *o);

/* The min/max kernel's arithmetic with each group's range taken from gamax
 * (indexed from row0) instead of its max|x|; bf16 takes a vector kernel when
 * the CPU has one (same bytes as the scalar one below). */
void nvfp4_quantize_rows_ranges(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                float gs, const float *gamax, uint8_t *packed, uint8_t *scales);
void nvfp4_quantize_rows_ranges_scalar(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                                       float gs, const float *gamax, uint8_t *packed, uint8_t *scales);

#endif

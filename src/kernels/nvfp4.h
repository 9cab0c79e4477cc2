/* NVFP4 (compressed-tensors "nvfp4-pack-quantized", tensor_group, 16 wide):
 * the exact arithmetic of compressed-tensors + llm-compressor's min-max
 * observer, including the places where torch rounds to the weight's dtype. */
#ifndef FF_NVFP4_H
#define FF_NVFP4_H

#include <stdint.h>
#include <stddef.h>

#include "dtype.h"

#define NVFP4_GROUP 16
#define NVFP4_FP4_MAX 6.0f
#define NVFP4_FP8_MAX 448.0f
/* An all-zero group would give scale 0 and divide by it; CT stores fp8 eps. */
#define NVFP4_ZERO_SCALE 0.125f

/* The 16 values an E2M1 code stands for (bit 3 = sign). */
extern const float nvfp4_code_value[16];

/* Largest |x| over n elements. Returns 0, or 1 and *bad = index of the first
 * NaN or Inf (the caller names the tensor). */
int nvfp4_absmax(const void *data, ff_dtype t, uint64_t n, float *amax, uint64_t *bad);

/* weight_global_scale = 2688 / amax, rounded as torch rounds it with amax in
 * the observed dtype; NaN/Inf (an all-zero tensor) become 1.0. */
float nvfp4_global_scale(float amax, ff_dtype observed);

/* E2M1 code of y (already divided by its scale), with CT's thresholds:
 * round to nearest, ties to even, clamp at 6, sign bit from y < 0. */
uint8_t nvfp4_fp4_code(float y);

/* Quantizes rows [row0, row0+nrows) of a [rows, cols] matrix. packed gets
 * cols/2 bytes a row, scales cols/16 fp8 bytes a row, both indexed from row0.
 * cols must be a multiple of 16. */
typedef void (*nvfp4_rows_fn)(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                              uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales);
void nvfp4_quantize_rows_scalar(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                                uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales);
/* The fastest kernel this CPU runs; every kernel gives identical bytes. */
nvfp4_rows_fn nvfp4_best_kernel(const char **name);
/* Kernel by name ("scalar", "avx2", "avx512"), NULL if unknown or unsupported. */
nvfp4_rows_fn nvfp4_kernel_by_name(const char *name);

/* Inverse: value = fp4 * (fp8 scale / gs), as f32 (CT then rounds to bf16). */
void nvfp4_dequantize_rows(const uint8_t *packed, const uint8_t *scales, float gs,
                           uint64_t cols, uint64_t nrows, float *out);

/* One group's fp8 scale: s = amax_g / 6 in the observed dtype, times gs in
 * f32, clamped to +-448, rounded to e4m3; zero becomes 0.125. The MSE
 * observers call it with their chosen range in place of amax_g. */
static inline uint8_t nvfp4_group_scale(float amax_g, float gs, ff_dtype t, float *s8f)
{
    float s = ff_round_to(t, amax_g / NVFP4_FP4_MAX) * gs;
    if (s > NVFP4_FP8_MAX)
        s = NVFP4_FP8_MAX;
    uint8_t code = ff_f32_to_e4m3(s);
    float v = ff_e4m3_to_f32(code);
    if (v == 0.0f) {
        code = ff_f32_to_e4m3(NVFP4_ZERO_SCALE);
        v = NVFP4_ZERO_SCALE;
    }
    *s8f = v;
    return code;
}

#endif

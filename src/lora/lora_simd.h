/* The merge's inner loops (lora_merge.c), scalar and vector; every kernel
 * gives the scalar kernel's bits. */
#ifndef FF_LORA_SIMD_H
#define FF_LORA_SIMD_H

#include <stdint.h>

typedef struct lora_kernels {
    const char *name;
    /* acc[j] = sum over k in order of u[k] * V[k][j] (V is r x n), fmaf by fmaf */
    void (*delta)(const float *u, const float *V, int64_t r, uint64_t n, float *acc);
    /* out[j] = bf16(base[j] + acc[j] * scale); returns how many differ from
     * base (as floats); *max_abs raised to the largest |acc[j] * scale|,
     * a NaN skipped */
    uint64_t (*apply_bf16)(const uint16_t *base, const float *acc, float scale, uint64_t n, uint16_t *out,
                           float *max_abs);
} lora_kernels;

void lora_delta_scalar(const float *u, const float *V, int64_t r, uint64_t n, float *acc);
uint64_t lora_apply_bf16_scalar(const uint16_t *base, const float *acc, float scale, uint64_t n, uint16_t *out,
                                float *max_abs);
/* "scalar", "avx2", "avx512"; NULL where this CPU lacks it */
const lora_kernels *lora_kernels_by_name(const char *name);
const lora_kernels *lora_kernels_best(void);

#endif

/* SIMD NVFP4 kernels, compiled with target attributes so one binary serves
 * every x86-64; each must give the scalar kernel's bytes exactly. */
#ifndef FF_NVFP4_SIMD_H
#define FF_NVFP4_SIMD_H

#include "nvfp4.h"

#if defined(__x86_64__)
void nvfp4_quantize_rows_avx2(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                              uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales);
void nvfp4_quantize_rows_avx512(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                                uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales);
#endif

#endif

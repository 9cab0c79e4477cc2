/* SIMD NVFP4 kernels, compiled with target attributes so one binary serves
 * every x86-64; each must give the scalar kernel's bytes exactly. */
#ifndef FF_NVFP4_SIMD_H
#define FF_NVFP4_SIMD_H

#include "nvfp4.h"

#if defined(__x86_64__)
/* What this CPU can run (CPUID), for the dispatch and the vector absmax. */
int nvfp4_cpu_avx2_ok(void);
int nvfp4_cpu_avx512_ok(void);
void nvfp4_quantize_rows_avx2(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                              uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales);
void nvfp4_quantize_rows_avx512(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                                uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales);
#endif

/* nvfp4_absmax with a vector fast path for bf16 (the common case); same
 * result and the same first-bad-index report. */
int nvfp4_absmax_fast(const void *data, ff_dtype t, uint64_t n, float *amax, uint64_t *bad);

#endif

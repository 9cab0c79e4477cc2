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

/* Another tensor's bf16 elements read while a kernel quantizes: their max
 * |x| comes back with the rows, so the next unit's amax pass runs inside
 * this unit's quantizing pass (the pass alone waits on memory; the kernel
 * leaves the core's loads idle). */
typedef struct nvfp4_side {
    const uint16_t *p;
    uint64_t n;           /* elements */
    uint16_t max;         /* out: max of the |x| bits; 0x7f80 or above: a NaN or Inf */
} nvfp4_side;

/* 1 when kernel k quantizes bf16 with nvfp4_quantize_rows_side's code. */
int nvfp4_side_ok(nvfp4_rows_fn k);
/* kernel k's bytes for bf16 rows, by k's own code (k as nvfp4_side_ok
 * allows), and side's max (side NULL: none; the AVX-512 kernel's bf16 rows
 * come this way, so its width is chosen in one place). */
void nvfp4_quantize_rows_side(nvfp4_rows_fn k, const void *w, uint64_t cols, uint64_t row0, uint64_t nrows,
                              float gs, uint8_t *packed, uint8_t *scales, nvfp4_side *side);

/* nvfp4_absmax with a vector fast path for bf16 (the common case); same
 * result and the same first-bad-index report. */
int nvfp4_absmax_fast(const void *data, ff_dtype t, uint64_t n, float *amax, uint64_t *bad);

#endif

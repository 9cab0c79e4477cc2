#include "nvfp4_simd.h"

#if defined(__x86_64__)
/* Placeholder until the vector kernels land: same bytes, scalar speed. */
void nvfp4_quantize_rows_avx2(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                              uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales)
{
    nvfp4_quantize_rows_scalar(w, t, cols, row0, nrows, gs, packed, scales);
}

void nvfp4_quantize_rows_avx512(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                                uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales)
{
    nvfp4_quantize_rows_scalar(w, t, cols, row0, nrows, gs, packed, scales);
}
#endif

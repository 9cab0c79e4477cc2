/* The NVFP4 kernel on an NVIDIA GPU: the same bytes as the CPU kernels
 * (src/nvfp4.c), for bf16 weights. Optional: built by `make cuda` only when
 * nvcc exists; nothing in `make test` needs it. */
#ifndef FF_NVFP4_CUDA_H
#define FF_NVFP4_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvfp4_gpu nvfp4_gpu;

/* Device buffers for units of up to max_elems bf16 values. */
int nvfp4_gpu_create(nvfp4_gpu **g, size_t max_elems, char *err, size_t errlen);
void nvfp4_gpu_destroy(nvfp4_gpu *g);

/* Copies n bf16 values to device element offset `at` (a unit's members go
 * one after another). */
int nvfp4_gpu_upload(nvfp4_gpu *g, size_t at, const uint16_t *host, size_t n);
/* max |x| over the first n uploaded values (exact: a bf16 value), or -1
 * when a NaN/Inf is present. */
float nvfp4_gpu_absmax(nvfp4_gpu *g, size_t n);
/* Quantizes the uploaded values as rows of `cols` (a multiple of 16) from
 * element offset `first`, `rows` rows, with global scale gs; copies packed
 * (rows*cols/2) and scales (rows*cols/16) back. */
int nvfp4_gpu_quantize(nvfp4_gpu *g, size_t first, size_t rows, size_t cols, float gs,
                       uint8_t *packed, uint8_t *scales);
/* Milliseconds spent in kernels (CUDA events) since create. */
double nvfp4_gpu_kernel_ms(const nvfp4_gpu *g);

#ifdef __cplusplus
}
#endif
#endif

/* NVFP4 checkpoint -> bf16 checkpoint: each module's weight_packed,
 * weight_scale and weight_global_scale become <module>.weight BF16 [out, in]
 * = bf16(code * (fp8 scale / global scale)) computed in f32, exactly what
 * compressed-tensors' decompressor does; every other tensor is copied in
 * order; config.json loses quantization_config; other files are copied. */
#ifndef FF_DEQUANTIZE_H
#define FF_DEQUANTIZE_H

#include <stdint.h>

#include "ff_err.h"

typedef struct dequant_opts {
    uint64_t shard_size;      /* bytes per shard (a tensor never splits) */
    int force;                /* replace an existing OUT */
    int threads;              /* <= 0: all cores (the bytes do not depend on it) */
    int progress;             /* draw a progress bar on stderr */
} dequant_opts;

int dequantize_run(const char *in_dir, const char *out_dir, const dequant_opts *o, ff_err *e);

#endif

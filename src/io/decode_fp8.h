/* FP8 weight-only channel-wise modules of a mixed output (quantize --fp8):
 * "<m>.weight" F8_E4M3 [out, in] and "<m>.weight_scale" [out, 1] in the
 * source dtype, compressed-tensors format naive-quantized. Found, checked and
 * decoded exactly as NaiveQuantizationCompressor.decompress does: the code
 * cast to the scale's dtype (exact), times the scale (the product of an e4m3
 * and a 16/32-bit float is exact in f32), rounded once to the scale's dtype.
 * verify, dequantize, diff and inspect share it; beside decode.c (NVFP4)
 * in io, below all four. */
#ifndef FF_DECODE_FP8_H
#define FF_DECODE_FP8_H

#include <stdint.h>

#include "checkpoint.h"

#define FP8_FORMAT "naive-quantized"

typedef struct fp8_module {
    char *module;                 /* "<m>" */
    const ckpt_tensor *weight, *scale;
    uint64_t rows, cols;
    ff_dtype dtype;               /* the scale's: what the module decodes to */
} fp8_module;

/* "<m>" into buf when tensor_name is "<m>.weight" or "<m>.weight_scale" of
 * a module that has both and neither weight_packed nor weight_global_scale
 * (those make it an NVFP4 module, whatever is missing). NULL otherwise. The
 * weight's dtype is not looked at: fp8_find judges it, so a module whose
 * weight lost its F8_E4M3 is still found and named. */
const char *fp8_module_of(const ckpt *c, const char *tensor_name, char *buf, size_t n);
/* Part of an FP8 module: 1 for its weight, 2 for its scale, 0 otherwise. */
int fp8_part(const ckpt *c, const char *tensor_name);

/* Finds "<module>" and checks its tensors: weight F8_E4M3 2-D, scale BF16,
 * F16 or F32 of shape [out, 1] (or [out]); an error naming the file and the
 * tensor otherwise. */
int fp8_find(const ckpt *c, const char *module, fp8_module *m, ff_err *e);
void fp8_module_free(fp8_module *m);

/* Scales that cannot have come from a quantizer: NaN, Inf, zero (an all-zero
 * row gets the dtype's eps) or negative (absmax / 448 is not). The count,
 * the first such row into *first and its value into *val. */
uint64_t fp8_bad_scales(const ckpt *c, const fp8_module *m, uint64_t *first, float *val);
/* Weight codes that are e4m3fn NaN (0x7f, 0xff); the first into *first. */
uint64_t fp8_nan_codes(const ckpt *c, const fp8_module *m, uint64_t *first);

/* Rows [row, row + n) decoded into out, n * cols elements of m->dtype. */
void fp8_decode_rows(const ckpt *c, const fp8_module *m, uint64_t row, uint64_t n, void *out);
/* The same rows' decode against src (those rows of the source weight, dtype
 * sd): squared differences into *se, squared source values into *ss (double,
 * added row by row so the sums do not depend on threads); *nonfinite counts
 * NaN/Inf decoded values. */
void fp8_error_rows(const ckpt *c, const fp8_module *m, uint64_t row, uint64_t n, const uint8_t *src, ff_dtype sd,
                    double *se, double *ss, uint64_t *nonfinite);
/* Drops rows [row, row + n) of the weight and scale from c's mapping. */
void fp8_drop_rows(const ckpt *c, const fp8_module *m, uint64_t row, uint64_t n);

#endif

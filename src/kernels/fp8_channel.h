/* FP8 weight-only, channel-wise: what llm-compressor 0.14 + compressed-tensors
 * write for QuantizationArgs(num_bits=8, type="float", strategy="channel",
 * symmetric=True, dynamic=False) with no input activations (format
 * "naive-quantized"; vLLM serves it as CompressedTensorsW8A16Fp8). Per row:
 * one scale in the weight's own dtype, the row's weights as e4m3fn bytes. */
#ifndef FF_FP8_CHANNEL_H
#define FF_FP8_CHANNEL_H

#include <stdint.h>

#include "dtype.h"

#define FP8CH_MAX 448.0f

/* The row scale s = absmax / 448 rounded to t (torch divides in the
 * weight's dtype); a zero scale becomes torch.finfo(t).eps, as
 * calculate_qparams does. Returned as a float holding t's value. */
float fp8ch_row_scale(float absmax, ff_dtype t);

/* One element: q = round_t(w / s); zero of either sign -> +0 (CT adds its
 * fp8 zero point during oneshot, which turns -0 into +0); else clamped to
 * +-448 and rounded to e4m3fn. */
uint8_t fp8ch_code(float w, float s, ff_dtype t);

/* Quantizes rows [row0, row0 + nrows) of a [rows, cols] matrix w of type t
 * (bf16, f16 or f32): codes gets cols bytes a row and scales one element of
 * type t a row (ff_dtype_size(t) bytes), both indexed from row0. Returns the
 * index (into w) of the first NaN or Inf, or UINT64_MAX; a row holding one
 * is left unwritten. */
uint64_t fp8ch_quantize_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                             uint8_t *codes, uint8_t *scales);

#endif

/* FP8-block sources (DeepSeek-V3/R1, Kimi-K2, the FP8 Qwen3/GLM uploads): a
 * Linear stored as F8_E4M3 "<mod>.weight" [N, K] plus F32
 * "<mod>.weight_scale_inv" [ceil(N/128), ceil(K/128)], one scale per 128x128
 * block (edge blocks partial). Decoded exactly as transformers 5.17's
 * Fp8Dequantize (integrations/finegrained_fp8.py, the path
 * from_pretrained(..., FineGrainedFP8Config(dequantize=True)) takes, which is
 * how llm-compressor users make their bf16 copy): the e4m3 value widened to
 * f32, times the block's f32 scale in f32, rounded once to bf16 (RNE). The
 * same sequence as DeepSeek's own weight_dequant kernel (fp8_cast_bf16.py),
 * which also defines the partial edge blocks transformers refuses. */
#ifndef FF_FP8_BLOCK_H
#define FF_FP8_BLOCK_H

#include <stdint.h>

#include "checkpoint.h"

#define FP8B_BLOCK 128
#define FP8B_SCALE_SUFFIX "weight_scale_inv"

/* The config's quantization_config: 0 none, 1 an FP8-block source fp4forge
 * decodes (quant_method fp8, weight_block_size [128, 128] or absent, fmt
 * e4m3 or absent), -1 anything else (why in *why). */
int fp8b_config(const json_t *config, const char **why);

/* t's scale tensor when t is an FP8-block weight ("<mod>.weight", F8_E4M3,
 * 2-D, with a "<mod>.weight_scale_inv" beside it), else NULL. A scale of
 * the wrong dtype or shape is an error (FF_EIO, *scale NULL). */
int fp8b_scale_of(const ckpt *c, const ckpt_tensor *t, const ckpt_tensor **scale, ff_err *e);

/* Is `name` the weight_scale_inv of an F8_E4M3 weight in c? */
int fp8b_is_scale(const ckpt *c, const char *name);

/* Rows [r0, r0 + n) of the [N, K] weight w (e4m3 bytes) with scales s
 * ([ceil(N/128), ceil(K/128)] f32) decoded to bf16 into out (n * K). */
void fp8b_decode_rows(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                      uint16_t *out);

/* The same into f32 (the product before rounding), for tests. */
void fp8b_decode_rows_f32(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                          float *out);

struct ff_pool;
/* The whole weight t (an FP8-block weight, scale its scale) as a malloc'd
 * bf16 copy [N, K] in *out, 128-row blocks spread over pool (may be NULL);
 * the bytes do not depend on it. Its FP8 pages are then dropped from the
 * mapping (st_map_drop; the page cache keeps them). */
int fp8b_decode_tensor(const ckpt *c, const ckpt_tensor *t, const ckpt_tensor *scale, struct ff_pool *pool,
                       uint16_t **out, ff_err *e);
/* The same into the caller's out (N * K bf16), which is left as it is on
 * an error. */
int fp8b_decode_into(const ckpt *c, const ckpt_tensor *t, const ckpt_tensor *scale, struct ff_pool *pool,
                     uint16_t *out, ff_err *e);

#endif

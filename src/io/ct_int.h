/* compressed-tensors `pack-quantized` INT4 weights (W4A16, symmetric, one
 * scale per group of columns: Kimi-K2.5/K2.6's routed experts), decoded bit
 * for bit as compressed-tensors 0.19's PackedQuantizationCompressor
 * .decompress then the model's cast to bf16:
 *   unpack_from_int32: value i of a row is bits [4i mod 32, +4) of the row's
 *     word i/8 (rows padded to whole words), minus 8;
 *   dequantize: q.to(scale.dtype) * scale, in the scale's dtype (torch
 *     multiplies in f32 and rounds once to that dtype), group g = columns
 *     [g*group, (g+1)*group);
 *   from_pretrained(dtype=bfloat16) then casts that to bf16 (RNE).
 * So a BF16 scale gives bf16(q * s) (the f32 product is exact), an F32
 * scale bf16(f32(q * s)), an F16 scale bf16(f16(q * s)). */
#ifndef FF_CT_INT_H
#define FF_CT_INT_H

#include <stdint.h>

#include "dtype.h"

#define CTINT_BITS 4

/* Words a row of K values takes. */
static inline uint64_t ctint_row_words(uint64_t K) { return (K * CTINT_BITS + 31) / 32; }

/* Rows [r0, r0 + n) of a [N, K] weight: packed I32 words (row-major,
 * ctint_row_words(K) a row), scales of dtype sd ([N, K / group]), into out
 * (n * K bf16). Unaligned input is fine: both are read through memcpy. */
void ctint_decode_rows(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t K, uint64_t group,
                       uint64_t r0, uint64_t n, uint16_t *out);

/* The scales' magnitude bits (which order as the magnitudes do) in one
 * read: the largest, and the largest of each CTINT_CHUNK scales. The check
 * for non-finite scales and the amax below both come from it: they were
 * five or six reads of every scale on the job's one serial thread (Kimi-K2
 * INT4 synth, 2 threads, its writes taken out: 60 ms in which the other
 * core waited). */
#define CTINT_CHUNK 256

typedef struct ctint_tops {
    uint32_t top;
    uint32_t *chunk;          /* nchunks, the last one short */
    uint64_t nchunks;
} ctint_tops;

/* The tops of n scales of dtype sd; -1: out of memory. */
int ctint_tops_build(const uint8_t *scales, ff_dtype sd, uint64_t n, ctint_tops *t);
void ctint_tops_free(ctint_tops *t);
/* 1 when no scale is NaN or infinite. */
int ctint_tops_finite(const ctint_tops *t, ff_dtype sd);

/* The largest |value| the decoder gives the whole [N, K] weight, read off
 * the scales and the codes of the groups whose scale could reach it (the
 * decoded magnitude is monotone in |code - 8| and in |scale|), t being the
 * scales' tops: 0 with *amax set, 1 when a value would be NaN or infinite
 * (decode to name it). */
int ctint_top_absmax(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t N, uint64_t K,
                     uint64_t group, const ctint_tops *t, float *amax);

#endif

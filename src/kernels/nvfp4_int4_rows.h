/* NVFP4 straight from compressed-tensors INT4 codes (pack-quantized,
 * symmetric, bf16 scales, one scale per group of a multiple of 16 columns:
 * Kimi-K2.5/K2.6's routed experts), with no bf16 copy in between.
 *
 * Every value of a 16-wide NVFP4 group decodes through one scale s: value
 * (code - 8) * s, rounded as the decoder rounds. The group's max |x| is the
 * decoded value of its largest |code - 8| (decoding is monotone in it), so
 * the group's E4M3 scale, and then the E2M1 code each of the 16 INT4 codes
 * becomes, depend on (s, that largest |code - 8|) alone. Each such pair is
 * quantized once, as a synthetic group (every code the pair allows)
 * through the caller's decoder, the scalar kernel's group scale and the
 * bf16 kernel's exact edges (nvfp4_thresh.h), and kept in a cache: a real
 * tensor's bf16 scales take a few hundred values, so a group is a lookup
 * and one byte shuffle, where decoding it and running the bf16 kernel
 * over the decoded copy were ~60% of an INT4 job. */
#ifndef FF_NVFP4_INT4_ROWS_H
#define FF_NVFP4_INT4_ROWS_H

#include <stdint.h>

#include "nvfp4_thresh.h"

/* One 16-wide group's 8 packed bytes (two codes a byte, low nibble first)
 * under bf16 scale `scale`, decoded to 16 bf16 values as the source's
 * reference dequantizer gives them. */
typedef void (*nvfp4_i4_decode_fn)(const void *ctx, const uint8_t packed[8], uint16_t scale, uint16_t out[16]);

/* Distinct scales held for one global scale: the next one starts the
 * cache over (a real tensor's bf16 scales take a few hundred values). */
#define NVFP4_I4_BLOCKS 1024
#define NVFP4_I4_MAXQ 9       /* |code - 8| is 0..8 */

typedef struct nvfp4_i4_slot {
    uint8_t map[16];          /* INT4 code -> E2M1 code */
    uint8_t scale;            /* the group's E4M3 scale byte */
    uint8_t built;
    uint8_t pad[14];
} nvfp4_i4_slot;

/* Exact, not hashed: a scale's block of slots, one a largest |code - 8|
 * (a direct-mapped table of 8192 slots thrashed on 1,700 keys: half the
 * kernel's time went to quantizing groups again). Valid for one global
 * scale; nvfp4_quantize_i4_rows starts it over when the global scale
 * changes, so one cache serves a thread for a whole run. ~430 KB. */
typedef struct nvfp4_i4_cache {
    float gs;
    int ready;
    uint64_t misses;          /* slots built */
    uint32_t nblocks;
    uint16_t block_of[1u << 16];   /* scale bits -> its block + 1; 0: none yet */
    nvfp4_thr_table edges;    /* the bf16 kernel's E2M1 edges of each E4M3 scale */
    /* the slots, [NVFP4_I4_BLOCKS][NVFP4_I4_MAXQ], from the first 64-byte
     * boundary in here whatever malloc returned: a map read across two
     * cache lines (every other slot, at one offset of this struct) made the
     * kernel 40% slower */
    unsigned char slot_space[NVFP4_I4_BLOCKS * NVFP4_I4_MAXQ * sizeof(nvfp4_i4_slot) + 64];
} nvfp4_i4_cache;

/* An empty cache (before its first use). */
void nvfp4_i4_cache_init(nvfp4_i4_cache *c);

/* 1 when this CPU runs the kernel (AVX2). */
int nvfp4_i4_rows_ok(void);

/* nrows rows of `cols` values (a multiple of 16), row r's codes at
 * packed + r * row_bytes, its bf16 scales at scales + r * scale_row_bytes,
 * one a `group` columns (a multiple of 16): the packed rows and scales the
 * bf16 kernels give for the decoded rows, with global scale gs. Scales
 * that decode to NaN or Inf are the caller's to refuse first. */
void nvfp4_quantize_i4_rows(const uint8_t *packed, uint64_t row_bytes, const uint8_t *scales,
                            uint64_t scale_row_bytes, uint64_t group, uint64_t cols, uint64_t nrows, float gs,
                            nvfp4_i4_decode_fn dec, const void *ctx, nvfp4_i4_cache *cache, uint8_t *pk,
                            uint8_t *sc);

#endif

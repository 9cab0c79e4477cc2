/* NVFP4 straight from 8-bit codes (an FP8-block source's E4M3 bytes), with
 * no bf16 copy in between. Within a 128-column block every code decodes
 * through one scale, and the decoded magnitude never falls as the code's
 * low seven bits rise; so a group's max |x| is its largest code's value,
 * and "|x| passes a bf16 edge" is "the code passes that edge's code". The
 * bf16 threshold kernel's edges (nvfp4_thresh.h) are carried into code
 * space once per block and scale code, and each code's bucket is a binary
 * search of them, 32 bytes at a time (AVX2) or 128 (AVX-512 BW and VBMI):
 * the bf16 kernel's bytes without decoding, and three compares a byte. */
#ifndef FF_NVFP4_CODE_ROWS_H
#define FF_NVFP4_CODE_ROWS_H

#include <stdint.h>
#include <stddef.h>

#include "nvfp4.h"

#define NVFP4_CODE_BLOCK 128   /* columns under one table */

/* What one block's codes decode to. The caller guarantees that mag[c]
 * (c < 127) is the bf16 bits of |value of code c| shifted left 16 (an f32's
 * bits), never smaller than mag[c - 1], and that a code's value is negative
 * exactly when its bit 7 differs from `flip`'s (0 or 0x80), zeros aside.
 * Code 127 (E4M3's NaN) is not decoded: it is reported. */
typedef struct nvfp4_code_block {
    uint32_t mag[128];
    float inv_unit; /* 1 / |scale|: code c's magnitude is about E4M3(c) / inv_unit (a first guess, checked) */
    uint8_t flip;
} nvfp4_code_block;

/* 1 when this CPU runs the kernel (AVX2). */
int nvfp4_code_rows_ok(void);

/* Bytes of `work` the kernel needs for rows of `cols` columns. */
size_t nvfp4_code_rows_work(uint64_t cols);

/* nrows rows of cols codes (cols a multiple of 16) under blocks[cols / 128
 * rounded up], quantized with global scale gs: the packed rows and scales
 * the bf16 kernels give for the decoded rows. Returns 1 when a magnitude
 * byte 0x7f (NaN) was seen: the output is then not that of any decoding,
 * and the caller decodes the rows to name the element. */
int nvfp4_quantize_code_rows(const uint8_t *codes, uint64_t cols, uint64_t nrows, const nvfp4_code_block *blocks,
                             float gs, void *work, uint8_t *packed, uint8_t *scales);

/* 1 when this CPU runs the kernel at `width` bits: 256 (AVX2) or 512
 * (AVX-512 BW and VBMI, the default where it runs). */
int nvfp4_code_rows_width_ok(int width);

/* The width that bf16 kernel k (nvfp4.h) stands for: 512 for the AVX-512
 * kernel where this CPU runs that width, else 256; so --kernel avx2 runs
 * AVX2 code throughout. */
int nvfp4_code_rows_width_for(nvfp4_rows_fn k);

/* nvfp4_quantize_code_rows at a width nvfp4_code_rows_width_ok allows: the
 * same bytes, for the tests and the bench that hold the widths side by side. */
int nvfp4_quantize_code_rows_width(int width, const uint8_t *codes, uint64_t cols, uint64_t nrows,
                                   const nvfp4_code_block *blocks, float gs, void *work, uint8_t *packed,
                                   uint8_t *scales);

#endif

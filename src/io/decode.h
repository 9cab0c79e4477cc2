/* Decoding compressed-tensors NVFP4 modules back to bf16, exactly as
 * compressed-tensors' decompressor does: value = code_value * (fp8 scale as
 * f32 / global_scale) in f32, then round-to-nearest-even to bf16. dequantize
 * writes these; verify compares them against the source. */
#ifndef FF_DECODE_H
#define FF_DECODE_H

#include <stdint.h>

#include "checkpoint.h"

#define DQ_PACKED "weight_packed"
#define DQ_SCALE "weight_scale"
#define DQ_GLOBAL "weight_global_scale"

/* The three tensors of one quantized module. */
typedef struct dq_module {
    char *module;                 /* "<mod>" (without ".weight_packed") */
    const ckpt_tensor *packed, *scale, *global;
    uint64_t rows, cols;          /* of the decoded [out, in] weight */
} dq_module;

/* Module name of a "<mod>.weight_packed" tensor into buf; NULL if the name has
 * another suffix. */
const char *dq_module_of(const char *tensor_name, char *buf, size_t n);
/* Which part of a quantized module a tensor is. A scale counts only when its
 * packed weight is there too (a lone weight_scale is an fp8 checkpoint's). */
typedef enum { DQ_PART_NONE = 0, DQ_PART_PACKED, DQ_PART_SCALE } dq_part_kind;
dq_part_kind dq_part(const ckpt *c, const char *tensor_name);

/* Finds and checks (dtypes, shapes) the three tensors of `module`. */
int dq_find(const ckpt *c, const char *module, dq_module *m, ff_err *e);
void dq_module_free(dq_module *m);

/* A tensor "<mod>.weight_scale" or "<mod>.weight_global_scale" with no
 * "<mod>.weight_packed" beside it: the module's name into mod, and the
 * suffix returned; NULL for any other tensor. Such a module has lost its
 * codes: a reader that pairs tensors by their packed weight would pass over
 * it and leave its scales orphaned. */
const char *dq_orphan_part(const ckpt *c, const char *tensor_name, char *mod, size_t n);

/* A source-quantization scale ("<mod>.input_scale", "<mod>.weight_scale_inv")
 * beside an NVFP4 module ("<mod>.weight_packed"): its suffix, else NULL.
 * NVFP4A16 has neither (activations are 16-bit, the weight's scales are
 * weight_scale and weight_global_scale), so one is a leftover of the source. */
const char *dq_stray_scale(const ckpt *c, const char *tensor_name);

/* The module's weight_global_scale into *gs; an error naming the file, the
 * tensor and the value unless it is a positive, finite, normal float. It is
 * 2688 / amax, so a subnormal one needs an amax past FLT_MAX: no finite
 * weight gives it, and decoding by it overflows. */
int dq_check_global(const ckpt *c, const dq_module *m, float *gs, ff_err *e);

/* Blocks whose fp8 scale is zero while their codes are not: their weights
 * decode to 0. No quantizer writes one (an all-zero group gets 0.125, CT's
 * eps, and a scale never rounds to 0), so each is a value lost after the
 * fact. *first gets the first such block's index (row-major, 16 wide). */
uint64_t dq_zero_scale_blocks(const ckpt *c, const dq_module *m, uint64_t *first);

/* What decoding saw: non-finite values (a NaN fp8 scale, a zero or NaN
 * global scale) are counted, not refused, so verify can name them. */
typedef struct dq_stats {
    uint64_t nonfinite;           /* f32 values that were NaN or Inf */
    uint64_t first_bad;           /* element index of the first one */
    float global_scale;
} dq_stats;

/* Decodes into f32 (rows*cols) and/or bf16 (rows*cols); either may be NULL. */
int dq_decode(const ckpt *c, const dq_module *m, float *f32, uint16_t *bf16, dq_stats *st,
              ff_err *e);

/* Every value one module can decode to: for each fp8 scale byte s and code
 * k, val[s * 16 + k] = code_value[k] * (e4m3(s) / gs), the very products
 * the row kernel forms, and rnd[] the same rounded to bf16. A row then
 * decodes by lookup, and a group whose 16 entries are finite cannot give a
 * NaN or Inf, so the finiteness count reads scales only. */
typedef struct dq_table {
    float val[256 * 16], rnd[256 * 16];
    unsigned char finite[256];
    /* the smallest scale magnitude byte (s & 0x7f) of a non-finite entry,
     * 0x80 when none: scales whose magnitudes all lie below it need no
     * look at finite[] one by one */
    unsigned bad_from;
    /* ff_f32_to_bf16(val) split into low and high bytes, 16 of each a
     * scale byte: a group decodes to bf16 by two byte shuffles (pshufb) */
    uint8_t lo[256 * 16], hi[256 * 16];
    int simd;                     /* the CPU runs the AVX2 lookup (1), and AVX-512 (2) */
} dq_table;
void dq_table_init(dq_table *t, float global_scale);

/* groups whole groups to bf16 by the table (out: groups * 16 values):
 * ff_f32_to_bf16 of val's entries, bit for bit, with or without SIMD. */
void dq_groups_bf16(const dq_table *t, const uint8_t *packed, const uint8_t *scales, uint64_t groups, int simd,
                    uint16_t *out);

/* Rows [row, row + n) of m: f32 and/or bf16 (either may be NULL) get n *
 * cols values from their start, bit for bit what dq_decode gives; st's
 * nonfinite adds up and its first_bad is lowered (module element index). */
void dq_decode_rows(const ckpt *c, const dq_module *m, const dq_table *t, uint64_t row, uint64_t n, float *f32,
                    uint16_t *bf16, dq_stats *st);

/* The same rows' bf16 decode against src (those rows of the source weight,
 * dtype sd): sum of squared differences into *se and of squared source
 * values into *ss, in double (each lane of a group summed apart, so the
 * sum is the same whatever thread runs which rows). */
void dq_error_rows(const ckpt *c, const dq_module *m, const dq_table *t, uint64_t row, uint64_t n,
                   const uint8_t *src, ff_dtype sd, double *se, double *ss, dq_stats *st);
/* The same for groups [g0, g0 + groups) given by their codes and scales (src
 * holding those groups' source values): with simd 1 or 2 (t->simd) a bf16
 * source takes the AVX2 or AVX-512 lanes, bit for bit the scalar loop's sums. */
void dq_error_groups(const dq_table *t, const uint8_t *packed, const uint8_t *scales, uint64_t groups, uint64_t g0,
                     const uint8_t *src, ff_dtype sd, int simd, double *se, double *ss, dq_stats *st);

/* Drops [off, off + bytes) of tensor t's data from c's mapping once read
 * (st_map_drop: the page cache keeps it), so a pass over the whole model
 * holds what is in use, not all it read. Nothing for memory a caller lent
 * (ckpt_open_memory): that is not ours to drop. */
void dq_drop(const ckpt *c, const ckpt_tensor *t, uint64_t off, uint64_t bytes);
/* All of t once it is consumed, and the 2 MB block its end shares with
 * what follows (st_map_drop rounds ends down, so without this each tensor
 * left its last block mapped and RSS grew by one block a tensor; dropping
 * a neighbour's block costs it a fault, not bytes). Never past the file. */
void dq_drop_whole(const ckpt *c, const ckpt_tensor *t);
/* Rows [row, row + n) of m's packed codes and scales, dropped the same way. */
void dq_drop_rows(const ckpt *c, const dq_module *m, uint64_t row, uint64_t n);

#endif

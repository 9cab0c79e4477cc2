/* Sources their vendor already quantized, read as the bf16 copy the
 * reference dequantizer gives, one weight at a time, so a 1T-parameter INT4
 * or MXFP4 model never needs its bf16 copy on disk:
 *   - FP8-block (DeepSeek-V3/R1, Kimi-K2, FP8 uploads): src/io/fp8_block.h.
 *   - compressed-tensors `pack-quantized` INT (Kimi-K2.5/K2.6: W4A16, group
 *     32, symmetric): "<mod>.weight_packed" I32, "<mod>.weight_scale",
 *     "<mod>.weight_shape"; decoded as compressed-tensors 0.19's
 *     PackedQuantizationCompressor.decompress (src/io/ct_int.c says how).
 *   - compressed-tensors `mxfp4-pack-quantized` (E2M1 codes two to a byte,
 *     one E8M0 exponent per 32): "<mod>.weight_packed" U8, "<mod>.weight_scale"
 *     U8; decoded as MXFP4PackedCompressor.decompress (src/io/mxfp4.c).
 * The plan reads a view of the checkpoint in which each such weight is one
 * BF16 "<mod>.weight" tensor (its byte range the stored one, for read-ahead)
 * and its scales and shape are gone: they belong to it and have no output. */
#ifndef FF_QSOURCE_H
#define FF_QSOURCE_H

#include <stdint.h>

#include "checkpoint.h"
#include "ct_int.h"

/* QS_GPTOSS_BF16 is not quantized: transformers' bf16 gpt-oss (what its
 * MXFP4 dequantizer saves) keeps the experts fused and transposed, which the
 * view splits into llm-compressor's per-expert Linears (src/io/gptoss.h). */
typedef enum { QS_NONE = 0, QS_FP8_BLOCK, QS_CT_INT, QS_CT_MXFP4, QS_GPTOSS_MXFP4, QS_GPTOSS_BF16 } qs_kind;

typedef struct qs_format {
    qs_kind kind;
    int bits;    /* QS_CT_INT: bits per value */
    int group;   /* QS_CT_INT, QS_CT_MXFP4: values per scale */
} qs_format;

/* The source's quantization_config: the top level's, else text_config's
 * (where Kimi-K2.5 keeps it); NULL for none. */
const json_t *qs_config_object(const json_t *config);
/* The config's quantization_config: 0 none, 1 a source fp4forge decodes
 * (*f filled), -1 anything else, with why in why[n] (a whole clause naming
 * the key: "config_groups.group_0.weights.symmetric is false: ..."). */
int qs_config(const json_t *config, qs_format *f, char *why, size_t n);
/* A source with no quantization_config whose stored layout the plan still
 * reads through a view: 1 with *f filled (gpt-oss's bf16 fused experts), 0
 * for none. */
int qs_layout(const ckpt *c, qs_format *f);
/* "FP8-block", "compressed-tensors INT4 pack-quantized, group 32", ... */
const char *qs_format_name(const qs_format *f, char *buf, size_t n);

/* One stored weight and the tensors that decode it. A view tensor may also
 * be a slice of a fused stored one (gpt-oss: expert e's gate rows are every
 * other row of its gate_up blocks; its gate bias every other element of
 * gate_up_proj_bias): decoded row r is stored row row0 + r * row_step.
 * Transposed (gpt-oss bf16: [E, in, out]), decoded element (r, c) is stored
 * element row0 + c * stride + r * row_step. */
typedef struct qs_weight {
    const ckpt_tensor *data;    /* F8_E4M3 weight, weight_packed or *_blocks; a bias for gather */
    const ckpt_tensor *scale;   /* weight_scale_inv, weight_scale or *_scales; NULL for gather */
    const ckpt_tensor *shape;   /* weight_shape (pack-quantized), else NULL */
    uint64_t row0, row_step;    /* slices: which stored rows (row_step 0: the whole tensor) */
    uint64_t stride;            /* transposed: elements per stored row */
    int gather;                 /* a bf16 slice copied, not codes decoded (gpt-oss's biases) */
    int transposed;             /* a bf16 slice copied across stored rows (gpt-oss bf16 experts) */
} qs_weight;

typedef struct qs_view {
    ckpt ck;          /* dir, config and files are the source's (borrowed) */
    st_tensor *st;    /* the view's headers of decoded weights */
    qs_weight *w;     /* per view tensor; .data NULL: stored as it is */
    qs_format fmt;
    int64_t nweights; /* weights decoded */
    unsigned parts;   /* which compressed-tensors companion suffixes occur (qsource.c) */
    struct qs_bufs *bufs;   /* decode buffers for reuse (src/io/qs_bufs.h) */
} qs_view;

/* The view of c (which must outlive it). Every stored weight is checked
 * here, from headers (and weight_shape's value when c is mapped): dtypes,
 * shapes, companions; an error names the file and the tensor. */
int qs_view_build(qs_view *v, const ckpt *c, const qs_format *f, ff_err *e);
void qs_view_free(qs_view *v);
/* t's stored weight when t is a tensor of v decoded from one, else NULL. */
const qs_weight *qs_weight_of(const qs_view *v, const ckpt_tensor *t);

struct ff_pool;
/* The whole weight as a bf16 [rows, cols] copy in *out (given back with
 * qs_buffer_release, or free()d), spread over pool (may be NULL; the bytes
 * do not depend on it); the stored bytes
 * are then dropped from the mapping. A NaN or infinite scale, or an E8M0
 * scale of 255, is an error naming the tensor and the element. */
int qs_decode(const ckpt *c, const qs_view *v, const qs_weight *w, struct ff_pool *pool, uint16_t **out, ff_err *e);
/* Gives a buffer qs_decode filled back to v for the next decode (NULL: none;
 * one qs_decode did not hand out, or v NULL: free()d). Either this or free()
 * for each buffer, and one of them for all of a view's: a buffer free()d is
 * never reused; one given back is reused without refaulting its pages. */
void qs_buffer_release(const qs_view *v, uint16_t *p);

/* A stored weight decoded some rows at a time into the caller's buffer, each
 * row the bytes qs_decode gives it: the executor decodes a task's rows into
 * a buffer the cache holds instead of writing a whole bf16 copy to memory
 * and reading it back twice (FP8-block, compressed-tensors INT4 and MXFP4
 * whole weights; not gpt-oss's slices, which qs_rows_able refuses). */
typedef struct qs_rows {
    qs_kind kind;
    const uint8_t *data, *scales;
    float *fp8_scales;          /* FP8-block: the scales copied (the data section need not be 4-aligned) */
    ff_dtype sd;                /* compressed-tensors INT: the scales' dtype */
    ctint_tops tops;            /* and their magnitudes, read once at open */
    uint64_t rows, cols, group;
} qs_rows;

int qs_rows_able(const qs_view *v, const qs_weight *w);
/* Checks what qs_decode checks (the same errors) and takes the geometry. */
int qs_rows_open(const ckpt *c, const qs_view *v, const qs_weight *w, qs_rows *r, ff_err *e);
/* Rows [r0, r0 + n) into out (n * cols bf16). */
void qs_rows_decode(const qs_rows *r, uint64_t r0, uint64_t n, uint16_t *out);
/* The largest |value| of rows [r0, r0 + n) as the decoded bf16 would give
 * it, without decoding (FP8-block: per 128-column block, the largest code
 * under its scale, since decoding is monotone in the code's magnitude):
 * 0 with *amax set, 1 when a value would be NaN or infinite (decode the
 * rows to find which), -1 when the format has no such shortcut. */
int qs_rows_absmax(const qs_rows *r, uint64_t r0, uint64_t n, float *amax);
/* The largest |value| of the whole weight from its largest scales (0 with
 * *amax set), 1 when that does not decide it (run qs_rows_absmax).
 * FP8-block: from the largest-scale blocks alone, when one of them holds
 * code 448; the other blocks' codes are not read, so check them with
 * qs_rows_nan before using decoded rows. compressed-tensors INT4: always,
 * unless a value would be NaN or infinite (ctint_top_absmax). */
int qs_rows_top_absmax(const qs_rows *r, float *amax);
/* 1 when rows [r0, r0 + n) of an FP8-block weight hold a NaN byte. */
int qs_rows_nan(const qs_rows *r, uint64_t r0, uint64_t n);
struct nvfp4_code_block;
/* FP8-block rows [r0, r0 + n) (under one row of scales) as the code kernel
 * reads them (nvfp4_code_rows.h): each block's codes decoded by
 * fp8b_decode_rows itself. 1 when the kernel cannot stand in for decoding
 * them: another format, two scale rows, a scale that is not finite. */
int qs_rows_code_blocks(const qs_rows *r, uint64_t r0, uint64_t n, struct nvfp4_code_block *blocks);
struct nvfp4_i4_cache;
/* compressed-tensors INT4 rows [r0, r0 + n) quantized with global scale gs
 * straight from their codes (nvfp4_int4_rows.h; cache: the calling
 * thread's): the bytes the bf16 kernels give for the decoded rows. 1 when
 * that kernel cannot stand in for decoding them: another format, scales
 * that are not bf16, a group that is not a multiple of 16. The caller has
 * checked nvfp4_i4_rows_ok() (the kernel needs AVX2). */
int qs_rows_quantize_i4(const qs_rows *r, uint64_t r0, uint64_t n, float gs, struct nvfp4_i4_cache *cache,
                        uint8_t *pk, uint8_t *sc);
/* Frees what open took and drops the stored bytes from the mapping. */
void qs_rows_close(const ckpt *c, const qs_weight *w, qs_rows *r);

/* MXFP4 weights (compressed-tensors' or gpt-oss's), row by row: the codes
 * (cols / 2 bytes) and E8M0 exponents (cols / 32) of decoded row r of the
 * view tensor t. For the exact route (src/quantize/mx_exact.h). */
const uint8_t *qs_mx_codes_row(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint64_t r);
const uint8_t *qs_mx_scales_row(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint64_t r);
/* Is the view's format MXFP4 (either layout)? */
int qs_is_mxfp4(const qs_view *v);
/* w holds MXFP4 codes and exponents (the exact route's rows): an MXFP4 view
 * may also hold bf16 slices (gpt-oss's biases, a fused bf16 expert tensor
 * beside the blocks), which have none. */
int qs_weight_mx_coded(const qs_view *v, const qs_weight *w);

#endif

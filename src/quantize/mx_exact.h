/* MXFP4 -> NVFP4 exactly (issue 39 item 3). An MXFP4 value is an E2M1 code
 * times 2^(e - 127), one exponent e per 32; NVFP4's is the same E2M1 code
 * times (E4M3 scale / global scale), one scale per 16. With the global scale
 * a power of two 2^k, the two 16-groups of an MXFP4 group take the scale
 * 2^(e - 127 + k), which E4M3 holds exactly from 2^-9 (its smallest
 * subnormal) to 2^8: so when a unit's exponents span at most 17 binades
 * (over the groups with a nonzero code; an all-zero group decodes to zero
 * whatever its scale), the codes are copied byte for byte and the NVFP4
 * tensor dequantizes to exactly the source's values (compressed-tensors
 * decodes code * (scale / gs) in f32: every factor a power of two). A unit
 * that spans more goes the reference route: decoded to bf16 and quantized
 * as llm-compressor would quantize that copy. */
#ifndef FF_MX_EXACT_H
#define FF_MX_EXACT_H

#include <stddef.h>
#include <stdint.h>

/* E4M3's powers of two. */
#define MX_EXACT_MIN_POW (-9)
#define MX_EXACT_MAX_POW 8

/* The exponents a unit's groups use (nonzero groups only). */
typedef struct mx_span {
    int emin, emax;   /* biased E8M0 */
    uint64_t groups;  /* 16-groups seen */
    int any;          /* a nonzero 16-group was seen */
} mx_span;

/* Adds a [rows, cols] MXFP4 weight: packed codes (cols / 2 bytes a row),
 * E8M0 exponents (cols / 32 a row). */
void mx_span_add(mx_span *s, const uint8_t *packed, const uint8_t *e8m0, uint64_t rows, uint64_t cols);
/* A weight's rows as the span reads them: a gpt-oss slice is every other
 * stored row, so rows are reached through the caller. */
typedef struct mx_rows {
    const uint8_t *(*codes)(const void *ctx, uint64_t r);   /* cols / 2 bytes */
    const uint8_t *(*exps)(const void *ctx, uint64_t r);    /* cols / 32 E8M0 bytes */
    const void *ctx;
    uint64_t rows, cols;
} mx_rows;

/* ORs into present (a bit an exponent) the exponents of rows [r0, r1). */
void mx_exps_present(const mx_rows *w, uint64_t r0, uint64_t r1, uint64_t present[4]);
/* The span mx_span_add gives over every row of the n weights, found from
 * the exponents present level by level from each end: a level counts when
 * one of its groups holds a nonzero code, so the codes of the other groups
 * are never read. 1 with *s set; 0 when more than `levels` levels at an end
 * hold only zero groups (run mx_span_add then). */
int mx_span_by_levels(const mx_rows *w, size_t n, const uint64_t present[4], int levels, mx_span *s);
/* Adds span o (another range's) to s. */
void mx_span_merge(mx_span *s, const mx_span *o);
/* 1 and *k (global scale 2^k) when the span fits E4M3 and 2^k is a normal
 * float, else 0. */
int mx_exact_k(const mx_span *s, int *k);
/* NVFP4 scales (cols / 16 bytes a row) of one weight under global 2^k. */
void mx_exact_scales(const uint8_t *e8m0, uint64_t rows, uint64_t cols, int k, uint8_t *scales);
/* The same in two steps, for a caller that writes many rows under one k:
 * each exponent's scale byte, then a lookup a group. */
void mx_exact_table(int k, uint8_t table[256]);
void mx_exact_scales_by(const uint8_t table[256], const uint8_t *e8m0, uint64_t rows, uint64_t cols, uint8_t *scales);

#endif

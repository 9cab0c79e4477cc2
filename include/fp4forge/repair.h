/* repair-scales: an existing NVFP4 checkpoint whose fused pieces (q/k/v of
 * one attention, gate/up of one MLP, each expert's gate/up) carry different
 * global scales is rewritten so each fused group has one. vLLM folds one
 * global scale per fused GEMM, so a group that disagrees is mis-scaled at
 * serve time (it warns "different global scales for parallel layers").
 *
 * Without the bf16 source each piece's FP8 block scales are re-expressed
 * under the group's common scale (the FP4 codes stay as they are); with the
 * source the affected groups are quantized again, as quantize would. Which
 * modules are fused comes from the family's rule table, exactly as verify's
 * fused_scales check finds them. The input is never written; the output goes
 * through the one checkpoint writer (staged, renamed into place). */
#ifndef FF_REPAIR_H
#define FF_REPAIR_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "ff_err.h"

typedef struct repair_opts {
    const char *against;      /* bf16 source: re-quantize affected groups from it; NULL: re-express */
    uint64_t shard_size;      /* bytes per shard (a tensor never splits) */
    int force;                /* replace an existing OUT */
} repair_opts;

/* What re-expressing one piece's block scales did to its decoded weights. */
typedef struct repair_stats {
    double worst_rel;         /* worst |new - old| / |old| over decoded bf16 values (old != 0) */
    double se, ss;            /* sum of (new - old)^2 and of old^2, for a Frobenius figure */
    uint64_t blocks, changed; /* block scales seen, and rewritten to another byte */
    uint64_t subnormal;       /* a normal scale that became an E4M3 subnormal */
    uint64_t zero;            /* a nonzero scale over nonzero codes that became zero */
    uint64_t nan;             /* NaN scales met (the caller refuses the input) */
    uint64_t lossy;           /* blocks with a normal scale whose values moved past REPAIR_MAX_REL */
} repair_stats;

/* The most re-expressing a normal block scale can move a decoded value by
 * rounding alone: half an E4M3 step (2^-4 of the scale) compounded with
 * bf16's rounding of the value before and after (2^-8 each),
 * (1 + 2^-4)(1 + 2^-8) / (1 - 2^-8) - 1 = 0.07083. A block past it lost
 * significant bits (its scale fell among E4M3's subnormals, or to zero);
 * repair_run refuses such a group rather than write it. */
#define REPAIR_MAX_REL 0.0709

/* One E4M3 block scale s8, stored under global scale g_piece, re-expressed
 * under g_common: round-to-nearest-even of s8 * g_common / g_piece, rounded
 * once (no double rounding through f32). With g_common <= g_piece the result
 * never exceeds s8, so it cannot overflow E4M3's 448. */
uint8_t repair_rescale(uint8_t s8, float g_piece, float g_common);

/* A piece's [rows, cols/16] scales re-expressed into out (codes in packed
 * unchanged, [rows, cols/2]); stats accumulate into st. A block whose codes
 * are all zero and whose scale would round to zero gets CT's eps 0.125, as
 * the quantizer stores all-zero groups. */
void repair_rescale_rows(const uint8_t *packed, const uint8_t *scales, uint64_t rows, uint64_t cols,
                         float g_piece, float g_common, uint8_t *out, repair_stats *st);

/* Reads in_dir, writes out_dir. *report (always set on FF_OK) says what was
 * done: see docs/repair-scales.md for its fields. */
int repair_run(const char *in_dir, const char *out_dir, const repair_opts *o, json_t **report, ff_err *e);
void repair_print(const json_t *report, FILE *out);

#endif

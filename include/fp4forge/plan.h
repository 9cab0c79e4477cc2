/* The plan: from headers and config alone, every output tensor, which source
 * bytes feed it, which Linears share a global scale, the ignore list, and the
 * invariants a servable NVFP4A16 output must meet. quantize executes a plan;
 * plan (the command) prints one and refuses a broken one before any work. */
#ifndef FF_PLAN_H
#define FF_PLAN_H

#include <stdio.h>

#include "family.h"
#include "checkpoint.h"
#include "safetensors.h"

/* One 2-D matrix to quantize: rows [row0, row0+rows) of src seen as
 * [numel/cols, cols] (a whole Linear, or one expert's slice of a fused 3-D). */
typedef struct plan_member {
    const ckpt_tensor *src;
    uint64_t row0, rows, cols;
    /* a transposed expert: rows [row0, row0 + cols) of src seen as
     * [numel/stride, stride] hold this Linear's columns col0, col0 + col_step,
     * ... (rows of them; col_step 2: gate and up interleaved) */
    int transposed;
    uint64_t col0, stride, col_step;
    char *module;           /* output module name: <module>.weight_packed ... */
    const char *family;
    /* the scheme: NVFP4A16 (out: weight_packed, then weight_scale and
     * weight_global_scale), or with fp8 FP8 weight-only channel-wise
     * (out: weight F8_E4M3 [rows, cols], then weight_scale [rows, 1] in the
     * source dtype; src/kernels/fp8_channel.h) */
    int fp8;
    size_t out;             /* index of its first output in plan.outs */
} plan_member;

/* Members that share one global scale (a fused q/k/v, gate/up, or one). */
typedef struct plan_unit {
    size_t first, count;    /* into plan.members */
    int fp8;                /* its members' scheme: one per fused unit, as vLLM requires */
    int dense;              /* whole Linears, no expert or router among them: what a budget
                               may write FP8 or keep */
} plan_unit;

typedef enum { ITEM_KEEP, ITEM_QUANT } plan_item_kind;

typedef struct plan_item {
    plan_item_kind kind;
    const ckpt_tensor *src; /* KEEP: the tensor copied */
    size_t unit;            /* QUANT */
    size_t out;             /* KEEP: its index in plan.outs */
} plan_item;

typedef struct plan_family_stat {
    const char *family;
    int64_t quantized;      /* Linears quantized (NVFP4 or FP8) */
    int64_t fp8;            /* of those, FP8 weight-only */
    int64_t kept;           /* tensors kept */
    int64_t kept_linears;
    uint64_t bytes_in, bytes_out;
} plan_family_stat;

/* A budget's choice (include/fp4forge/budget.h): Linears the recipe would
 * write NVFP4 that go FP8 weight-only or stay in the source dtype instead,
 * by exact module name, each list sorted by strcmp. Whole fused units only. */
typedef struct plan_choice {
    char **fp8;
    size_t nfp8;
    char **keep;
    size_t nkeep;
} plan_choice;

struct plan_budget;

#define PLAN_MAX_FAMILIES 32
#define PLAN_MAX_NOTES 64

typedef struct plan_opts {
    const char *const *ignore_re;  /* --ignore: never quantize matching modules */
    int nignore;
    const char *const *only_re;    /* --only: quantize only matching Linears */
    int nonly;
    const char *const *fp8_re;     /* --fp8: matching Linears the recipe quantizes go FP8
                                      weight-only channel-wise instead of NVFP4 */
    int nfp8;
    int allow_router;              /* --allow-router-quantization */
    int allow_partial;             /* accept a quantize set smaller than the config implies */
    const plan_choice *choice;     /* NULL, or a budget's upgrades */
    const ff_family *family;       /* --family-file: this family, not the one the config names */
    int infer_family;              /* --infer-family: an unknown architecture's description inferred
                                      (include/fp4forge/infer.h), used only when fully derived */
} plan_opts;

typedef struct plan {
    const ff_family *fam;
    ff_family *fam_own;     /* the parsed instance of a described family */
    ff_expect expect;
    plan_member *members;
    size_t nmembers, cap_members;
    plan_unit *units;
    size_t nunits, cap_units;
    plan_item *items;
    size_t nitems, cap_items;
    st_out *outs;
    size_t nouts, cap_outs;
    char **ignore;          /* module names of Linears left unquantized */
    size_t nignore, cap_ignore;
    plan_family_stat fam_stats[PLAN_MAX_FAMILIES];
    int nfam;
    int64_t q_dense, q_experts, q_routers, kept_routers, unknown;
    int64_t q_fp8;          /* Linears written FP8 (counted in q_dense too) */
    int64_t budget_kept;    /* Linears a budget keeps in the source dtype (ignored, yet
                               counted against the config's dense Linears) */
    struct plan_budget *budget; /* the choice behind opts.choice and its figures, or NULL */
    uint64_t bytes_in, bytes_out;
    char *notes[PLAN_MAX_NOTES];       /* warnings */
    int nnotes;
    char *violations[PLAN_MAX_NOTES];  /* broken invariants: the plan is refused */
    int nviolations;
    char *arch_class;                  /* "dense" / "moe" */
    int layers, experts, has_vision;
    /* A source its vendor quantized (FP8-block, compressed-tensors INT4 or
     * MXFP4; src/io/qsource.h): the plan is built over a view of the
     * checkpoint in which each stored weight reads as one BF16 "<mod>.weight"
     * (its scales and shape belong to it and have no output); the executor
     * decodes such a weight unit by unit. NULL for an unquantized source. */
    struct qs_view *src_view;
    int64_t src_weights;               /* stored weights decoded */
} plan;

/* Builds the plan. Returns FF_EPLAN (with the first violation in e) when an
 * invariant is broken; the plan is still filled so it can be printed.
 * plan_free it whatever this returns. */
int plan_build(plan *p, const ckpt *c, const plan_opts *o, ff_err *e);
void plan_free(plan *p);
/* When t (a tensor a plan item or member reads) is decoded from a stored
 * weight of a quantized source: that weight (src/io/qsource.h), else NULL. */
const struct qs_weight *plan_source_weight(const plan *p, const ckpt_tensor *t);
/* Source bytes a unit reads. */
uint64_t plan_unit_bytes_in(const plan *p, const plan_unit *u);
/* The member's [rows, cols] weight in its source dtype: a pointer into
 * `base` (the tensor's bytes: the map, or a producer's copy) when stored
 * that way, else a malloc'd transposed copy returned in *owned (free it). */
const uint8_t *plan_member_rows(const plan_member *m, const uint8_t *base, void **owned, ff_err *e);
/* Source byte range [*lo, *hi) of the tensor a member reads, for read-ahead. */
void plan_member_span(const plan_member *m, uint64_t *lo, uint64_t *hi);
void plan_print(const plan *p, const ckpt *c, FILE *out);
json_t *plan_to_json(const plan *p, const ckpt *c);
/* The plan as `fp4forge plan` prints it: text, or JSON with json. */
void plan_show(const plan *p, const ckpt *c, int json, FILE *out);

#endif

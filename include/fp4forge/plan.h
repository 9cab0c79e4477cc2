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
     * [numel/stride, stride] hold this Linear's columns [col0, col0 + rows) */
    int transposed;
    uint64_t col0, stride;
    char *module;           /* output module name: <module>.weight_packed ... */
    const char *family;
    size_t out;             /* index of its weight_packed in plan.outs (then scale, global) */
} plan_member;

/* Members that share one global scale (a fused q/k/v, gate/up, or one). */
typedef struct plan_unit {
    size_t first, count;    /* into plan.members */
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
    int64_t quantized;      /* Linears quantized */
    int64_t kept;           /* tensors kept */
    int64_t kept_linears;
    uint64_t bytes_in, bytes_out;
} plan_family_stat;

#define PLAN_MAX_FAMILIES 32
#define PLAN_MAX_NOTES 64

typedef struct plan_opts {
    const char *const *ignore_re;  /* --ignore: never quantize matching modules */
    int nignore;
    const char *const *only_re;    /* --only: quantize only matching Linears */
    int nonly;
    int allow_router;              /* --allow-router-quantization */
    int allow_partial;             /* accept a quantize set smaller than the config implies */
} plan_opts;

typedef struct plan {
    const ff_family *fam;
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
    uint64_t bytes_in, bytes_out;
    char *notes[PLAN_MAX_NOTES];       /* warnings */
    int nnotes;
    char *violations[PLAN_MAX_NOTES];  /* broken invariants: the plan is refused */
    int nviolations;
    char *arch_class;                  /* "dense" / "moe" */
    int layers, experts, has_vision;
    /* An FP8-block source (src/io/fp8_block.h): the plan is built over a
     * view of the checkpoint's tensors in which each F8_E4M3 weight with a
     * weight_scale_inv reads as BF16 (its scale belongs to it and has no
     * output); the executor decodes such a tensor unit by unit. NULL when
     * the source has none. */
    ckpt_tensor *fp8_view;             /* ntensors entries, members point here */
    st_tensor *fp8_st;                 /* the BF16 headers of the view */
    const ckpt_tensor **fp8_scale;     /* per tensor index: its scale, or NULL */
    const ckpt *fp8_src;               /* the checkpoint the view is over */
    int64_t fp8_weights;               /* FP8-block weights decoded */
} plan;

/* Builds the plan. Returns FF_EPLAN (with the first violation in e) when an
 * invariant is broken; the plan is still filled so it can be printed.
 * plan_free it whatever this returns. */
int plan_build(plan *p, const ckpt *c, const plan_opts *o, ff_err *e);
void plan_free(plan *p);
/* When t (a tensor a plan item or member reads) is the BF16 view of an
 * FP8-block weight: the stored F8_E4M3 tensor, with its scale in *scale
 * (scale may be NULL). Else NULL. */
const ckpt_tensor *plan_fp8_source(const plan *p, const ckpt_tensor *t, const ckpt_tensor **scale);
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

#endif

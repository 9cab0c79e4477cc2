/* Architecture rules: which tensors are quantized, which Linears are left
 * alone (and so go in the ignore list), which share a global scale, and how
 * fused 3-D experts split. One data table per family; the matcher is generic. */
#ifndef FF_ARCH_H
#define FF_ARCH_H

#include <jansson.h>
#include <regex.h>
#include <stdint.h>

#include "ff_err.h"

typedef enum {
    ROLE_KEEP = 0,      /* copied byte for byte */
    ROLE_LINEAR,        /* 2-D [out, in] Linear weight: quantized */
    ROLE_EXPERTS_FUSED2,/* 3-D [E, 2I, H]: per expert, rows [0,I) and [I,2I) are two Linears */
    ROLE_EXPERTS_ONE,   /* 3-D [E, out, in]: per expert one Linear */
} arch_role;

/* Why a kept tensor must never be quantized (plan refuses to, exit 3). */
typedef enum {
    GUARD_NONE = 0,
    GUARD_ROUTER,       /* quantized routers serve NaN; --allow-router-quantization overrides */
    GUARD_FIXED,        /* vision, embeddings, norms, lm_head: never */
} arch_guard;

typedef struct arch_rule {
    const char *regex;        /* POSIX ERE over the whole tensor name */
    arch_role role;
    const char *family;       /* report group */
    int linear;               /* a Linear's weight (kept ones go in the ignore list) */
    const char *fuse;         /* tie key: members under one parent share a global scale */
    arch_guard guard;
    /* the parent module is a Linear to compressed-tensors too (a "Router"
     * class counts as Linear), so it is listed in ignore beside this one */
    int ignore_parent;
    /* experts: output module names under "<parent>.<e>." */
    const char *expert_out[2];
} arch_rule;

typedef struct arch_expect {
    int64_t dense_linears;    /* quantized 2-D Linears the config implies */
    int64_t expert_linears;   /* layers x experts x 3 */
    int64_t routers;          /* router Linears that must stay unquantized */
    int64_t moe_layers, experts;
    int64_t expert_inter, hidden;
} arch_expect;

typedef struct arch_shape {
    int layers, has_vision, moe, experts, tie_embeddings;
} arch_shape;

typedef struct arch_family {
    const char *name;
    int (*matches)(const json_t *config);
    const arch_rule *rules;
    size_t nrules;
    /* what the config implies, for the plan's invariants */
    int (*expect)(const json_t *config, arch_expect *x, ff_err *e);
    /* the model's shape for reports (plan, inspect); fields the config
     * does not give stay 0 */
    void (*describe)(const json_t *config, arch_shape *s);
} arch_family;

/* Families known, NULL-terminated. */
extern const arch_family *const arch_families[];
const arch_family *arch_detect(const json_t *config);
const arch_family *arch_by_name(const char *name);

/* Compiled rules of one family (no global state: one per plan). */
typedef struct arch_matcher {
    const arch_family *fam;
    regex_t *re;
    size_t n;
} arch_matcher;

int arch_matcher_init(arch_matcher *m, const arch_family *fam, ff_err *e);
void arch_matcher_free(arch_matcher *m);
/* First matching rule, or NULL (unknown tensors are kept and reported). */
const arch_rule *arch_match(const arch_matcher *m, const char *name);

#endif

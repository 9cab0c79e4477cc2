/* A memory budget for the weights: which Linears to write FP8 weight-only or
 * keep in the source dtype, instead of NVFP4A16, so that the output is the
 * most accurate one that still fits. No calibration data: each fused unit's
 * sensitivity is the output error its quantization leaves, estimated from
 * its weights alone (docs/quality.md shows how well that predicts the KL it
 * costs on a real model). The choice is made over the plan's dense units
 * (q/k/v, gate/up, a single Linear): experts stay NVFP4, since vLLM 0.32 has
 * no FP8 weight-only MoE scheme and a bf16 expert costs 3.6x its NVFP4. */
#ifndef FF_BUDGET_H
#define FF_BUDGET_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "plan.h"

typedef enum { SCHEME_NVFP4, SCHEME_FP8, SCHEME_KEEP } budget_scheme;

/* One fused unit the budget may upgrade. */
typedef struct budget_unit {
    char *module;               /* its first Linear's source module name (+ the others' last names) */
    size_t unit;                /* its index in the plan's units */
    size_t members;
    uint64_t weights;           /* elements */
    uint64_t bytes[3];          /* output bytes as NVFP4A16, FP8 channel-wise, kept */
    double err[3];              /* squared weight error each scheme leaves (kept: 0) */
    double energy;              /* sum of its squared weights */
    double fourth;              /* sum of their fourth powers */
    double kurtosis;            /* E[w^4] / E[w^2]^2 over the unit's weights */
    double score[3];            /* the sensitivity the choice reads: err x kurtosis^2, the
                                   error each scheme leaves, weighted by how heavy-tailed
                                   the unit's weights are (bench/sensitivity_proxies.py) */
    budget_scheme scheme;       /* the choice */
} budget_unit;

typedef struct plan_budget {
    uint64_t budget;            /* weight bytes allowed */
    uint64_t floor;             /* the output with every unit NVFP4 (the smallest possible) */
    uint64_t ceiling;           /* every unit kept: what the budget cannot improve on */
    uint64_t chosen;            /* the chosen output's bytes */
    int holds_source;           /* the budget holds the unquantized weights: nothing to do */
    char from[400];             /* how the budget was derived (--fit), or empty */
    budget_unit *units;
    size_t nunits;
    size_t nfp8, nkeep;         /* units upgraded */
    plan_choice choice;
} plan_budget;

/* plan_build under a weight budget: the recipe's plan, every dense unit's
 * sensitivity read from the weights (c opened with data; threads <= 0: all
 * cores), the most sensitive upgraded while the output fits, and the plan
 * rebuilt with that choice (p->budget holds it; plan_free frees it). A
 * budget below the all-NVFP4 output is refused (FF_EPLAN) with the smallest
 * size possible; a quantized source (FP8-block, INT4, MXFP4) is refused. */
int plan_build_budget(plan *p, const ckpt *c, const plan_opts *o, uint64_t budget, int threads, ff_err *e);
void plan_budget_free(plan_budget *b);

/* The choice over units with known bytes and scores: the units with the
 * largest score removed per byte added go first (NVFP4 -> FP8 -> kept), as
 * long as the total stays within budget. Sets each unit's scheme, b->chosen,
 * b->nfp8 and b->nkeep; -1 when out of memory. */
int budget_choose(plan_budget *b);

/* Each dense unit's figures from its weights, on a thread pool; units
 * (p->nunits of them) is filled for the dense ones, and *n says how many. */
int budget_measure(const plan *p, const ckpt *c, int threads, budget_unit **units, size_t *n, ff_err *e);

/* The choice by module class: a unit's module with its layer (and expert)
 * indices written "*", e.g. "model.layers.*.self_attn.q_proj". */
typedef struct budget_class {
    char *name;
    size_t count[3];            /* units per scheme */
} budget_class;

/* The classes in order of first appearance; -1 when out of memory. */
int budget_classes(const plan_budget *b, budget_class **out, size_t *n);
void budget_classes_free(budget_class *c, size_t n);
/* The budget's lines in plan's text, and its JSON object. */
void plan_budget_print(const plan_budget *b, FILE *out);
json_t *plan_budget_json(const plan_budget *b);

#endif

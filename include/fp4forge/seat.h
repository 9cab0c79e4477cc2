/* The seat a plan is made for: a weight budget given in bytes (--budget), or
 * the one fit leaves on a GPU (--fit: memory free or allotted, less the KV
 * cache vLLM would allocate at the context, less the activation and encoder
 * reserves). plan_build_seat is plan_build when neither is asked for. */
#ifndef FF_SEAT_H
#define FF_SEAT_H

#include "budget.h"
#include "fit.h"

typedef struct plan_seat {
    uint64_t budget;    /* weight bytes; 0: none given */
    int fit;            /* the budget is what fit_opts leave for the weights */
    fit_opts fit_opts;
    int threads;        /* the measuring pass; <= 0: all cores */
} plan_seat;

void plan_seat_default(plan_seat *s);
/* Whether a budget applies (and so the weights are read: c opened with data). */
int plan_seat_given(const plan_seat *s);
int plan_build_seat(plan *p, const ckpt *c, const plan_opts *o, const plan_seat *s, ff_err *e);

#endif

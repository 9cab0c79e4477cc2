/* What plan.c shares with the checks beside it. Private to src/plan. */
#ifndef FF_PLAN_INT_H
#define FF_PLAN_INT_H

#include "plan.h"

/* Appends a formatted line to a plan's notes or violations (NULL when out
 * of memory: plan_build turns any NULL into an error, so a violation is
 * never lost silently). */
void plan_note(char **list, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The checks that hold whatever the family's rules say (plan_guard.c):
 * violations added to p. */
void plan_guard(plan *p, const ckpt *c, const plan_opts *o);

#endif

/* plan --infer: a family description (docs/family-files.md) proposed for a
 * checkpoint whose architecture fp4forge has no family for, from its
 * config.json keys and its tensor names and shapes alone. A guess is never
 * trusted by being plausible: a tensor no rule can place is listed and
 * kept, a router-shaped one is never quantized, and `derived` is set only
 * when every invariant's config key was found and agrees with the tensors. */
#ifndef FF_INFER_H
#define FF_INFER_H

#include "checkpoint.h"
#include "ff_err.h"

typedef struct ff_infer {
    char *text;           /* the proposed description */
    int derived;          /* every tensor placed, every count and key derived and agreeing */
    char why[512];        /* when not derived: the first thing that was not */
    int unplaced;         /* tensors no rule could place (kept; each named in the text) */
} ff_infer;

int ff_family_infer(const ckpt *c, ff_infer *r, ff_err *e);
void ff_infer_free(ff_infer *r);

#endif

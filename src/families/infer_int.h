/* plan --infer's shared state: the templates (tensor names with the layer
 * index as '#' and the expert index as '@') and where each was placed.
 * infer.c scans and places; infer_text.c derives the counts and writes
 * the description. Private to src/families. */
#ifndef FF_INFER_INT_H
#define FF_INFER_INT_H

#include <jansson.h>
#include <stdint.h>

#include "checkpoint.h"
#include "family.h"
#include "infer.h"

typedef enum {
    K_UNPLACED = 0, K_QUANT, K_EXPERT, K_FUSED2, K_FUSED2_T, K_ONE, K_ONE_T, K_ROUTER, K_KEEP, K_TOWER,
    K_MTP,                    /* only in multi-token-prediction layers: no rule of its own */
} infer_kind;

typedef struct infer_tmpl {
    char *name;
    const st_tensor *st;      /* its first tensor */
    int64_t count;
    int layered, per_expert;
    int main;                 /* seen outside the multi-token-prediction layers */
    infer_kind kind;
    const char *group, *fuse, *out;
    int linear, fixed;
    int parent;               /* a router whose parent module is listed in ignore too */
    int ambiguous;            /* a fused layout its shape cannot tell (I == H): taken as transformers stores it */
    const char *oriented_by;  /* the sibling whose shape told the layout its own could not */
} infer_tmpl;

typedef struct infer_scan {
    const json_t *cfg;        /* the config object the sizes are in */
    const char *section;      /* its key, or NULL for the top level */
    int64_t layers, hidden, experts;
    long seen_experts;        /* highest expert index + 1 in a per-expert name */
    int64_t fused_width;      /* an expert's width read off a fused down projection */
    int mtp;                  /* a layer index at or past num_hidden_layers */
    infer_tmpl *tmpl;
    size_t ntmpl, cap_tmpl;
    size_t ntensors;
    size_t *tmpl_of;          /* each tensor's template (SIZE_MAX: skipped) */
    long *layer_of;           /* each tensor's layer index, -1 for none */
} infer_scan;

int infer_scan_build(infer_scan *s, const ckpt *c, ff_err *e);
void infer_scan_free(infer_scan *s);
/* The first of keys the config has, > 0 and equal to want (any when
 * want < 0): 1 with *key set, else 0. */
int infer_first_key(const json_t *c, const char *const *keys, int64_t want, const char **key);

#endif

/* A checkpoint's census: every tensor classified into its architecture family
 * by the rule table (quantized modules by their weight's rule, split experts
 * by the rule's expert output names), the architecture class, shards and the
 * quantization_config. inspect prints it; verify and diff are built on it. */
#ifndef FF_INSPECT_H
#define FF_INSPECT_H

#include <jansson.h>
#include <stdio.h>

#include "family.h"
#include "checkpoint.h"

/* What a positive control must share with the output it stands in for. */
typedef struct insp_class {
    const char *arch;       /* the family's name, or "unknown" */
    int moe, experts, layers, vision;
    int tie_embeddings;
} insp_class;

typedef struct insp_row {
    const char *family;
    ff_dtype dtype;
    char suffix[48];        /* last component of the name: weight_packed, weight, ... */
    int64_t count;
    uint64_t bytes;
} insp_row;

typedef struct insp {
    const ckpt *c;
    ff_matcher m;
    int have_matcher;
    insp_class cls;
    insp_row *rows;
    size_t nrows, cap;
    size_t *row_index;      /* open addressing over rows by (family, dtype,
                             * suffix): a header of unique suffixes made the
                             * linear search quadratic */
    size_t index_cap;
    uint64_t index_key[2];
    const json_t *qcfg;     /* config's quantization_config (borrowed) or NULL */
} insp;

/* fam: the family whose rules classify the tensors (--family-file), or
 * NULL for the one the config names. */
int insp_build(insp *s, const ckpt *c, const ff_family *fam, ff_err *e);
void insp_free(insp *s);
/* The rule a tensor falls under (quantized parts map to their module's
 * weight), or NULL. */
const ff_rule *insp_rule(const insp *s, const char *tensor_name);
/* The rule of a module ("<mod>": its "<mod>.weight", or a split expert's
 * fused rule), or NULL; any length of name. */
const ff_rule *insp_module_rule(const insp *s, const char *module);
/* The fused-group key of a quantized module ("" when it stands alone) into
 * key; returns its length as snprintf does, so a caller can size key. */
size_t insp_tie_key(const insp *s, const char *mod, char *key, size_t n);
/* Its family name, "other" when no rule matches. */
const char *insp_family(const insp *s, const char *tensor_name);
/* The ignore list's entries, or NULL. */
const json_t *insp_ignore(const insp *s);
/* "dense" / "moe". */
const char *insp_class_name(const insp_class *k);
void insp_print(const insp *s, FILE *out);
json_t *insp_to_json(const insp *s);

/* Names grouped by pattern (numeric components -> N), for one-line reports
 * like "30 missing: model.layers.N.mlp.gate". Input: a JSON
 * array of strings; output: array of {"pattern", "count", "names"}. */
json_t *insp_group_names(const json_t *names);

#endif

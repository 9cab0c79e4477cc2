/* A family described as data: the parsed form of a description's text
 * (docs/family-files.md). The rule table becomes ff_rule rows, the config
 * keys become the invariants and the geometry; family.c reaches it through
 * ff_family.desc. Private to src/families. */
#ifndef FF_FAMDESC_H
#define FF_FAMDESC_H

#include <jansson.h>

#include "family.h"

#define FAMDESC_MAX_KEYS 8
#define FAMDESC_MAX_TYPES 16

/* Which layers carry experts, from config keys (transformers' rules). A key
 * the config lacks takes its neutral value. */
typedef struct famdesc_moe_layers {
    int all;                  /* every layer */
    const char *step;         /* sparse when (layer + 1) % step == 0 (Qwen's decoder_sparse_step) */
    const char *freq;         /* sparse when layer % freq == 0 (DeepSeek's moe_layer_freq) */
    const char *first_dense;  /* layers below it are dense (first_k_dense_replace) */
    const char *start, *end;  /* sparse only in [start, end] (ERNIE's moe_layer_start/end_index; end < 0: none) */
    const char *interval;     /* sparse when (layer + 1) % interval == 0 (ERNIE's moe_layer_interval) */
    const char *except;       /* a list of dense layers (mlp_only_layers) */
} famdesc_moe_layers;

typedef struct famdesc_kind_count {
    const char *kind;
    int64_t dense;
} famdesc_kind_count;

typedef struct ff_famdesc {
    ff_family fam;            /* first: an instance is freed through its family */
    ff_rule *rules;
    size_t nrules, cap_rules;
    char **owned;             /* every string the rows point to */
    size_t nowned, cap_owned;
    const char *types[FAMDESC_MAX_TYPES + 1];
    const char *section;      /* config keys are read under this object (text_config), when present */
    const char *layers_key;
    const char *experts_keys[FAMDESC_MAX_KEYS + 1], *top_k_keys[FAMDESC_MAX_KEYS + 1];
    const char *width_keys[FAMDESC_MAX_KEYS + 1];
    famdesc_moe_layers moe;
    int64_t dense_per_layer, dense_per_moe_layer, routers_per_moe_layer;
    /* A config list of one string a layer (Gemma-4's layer_types) and the
     * counts that differ for a kind: full-attention layers under k_eq_v have
     * no v_proj. [0] dense layers, [1] MoE layers. */
    const char *kinds_key;
    /* Or (layer-kind-numbers) kinds_key is a list of layer numbers counted
     * from kinds_base (Kimi-K3's linear_attn_config.kda_layers, 1-based):
     * those layers are kinds_named, every other kinds_other. */
    int kinds_numbered;
    int64_t kinds_base;
    const char *kinds_named, *kinds_other;
    famdesc_kind_count kind_dense[2][FAMDESC_MAX_KEYS];
    int nkind_dense[2];
    const char *shared_key;   /* MoE layers carry a shared expert when this key is > 0 */
    int64_t shared_dense, shared_routers;
    int mtp;                  /* layers at index >= the layer count are multi-token prediction */
    const char *implicit[FAMDESC_MAX_KEYS + 1];
    char dense_rule[200];
} ff_famdesc;

/* Parses text (origin names it in errors: "FILE:LINE: ..."); the instance's
 * fam is filled from it with fam.desc pointing back. base's C hooks (doctor,
 * synth, encoder) are carried over when base is given. */
int famdesc_parse(const char *text, size_t len, const char *origin, const ff_family *base, ff_famdesc **out,
                  ff_err *e);
void famdesc_free(ff_famdesc *d);

/* The config object the keys are read in. */
const json_t *famdesc_config(const ff_famdesc *d, const json_t *config);
int famdesc_geometry(const ff_famdesc *d, const json_t *config, ff_geometry *g, ff_err *e);
int famdesc_expect(const ff_famdesc *d, const json_t *config, ff_expect *x, ff_err *e);
int famdesc_claims(const ff_famdesc *d, const json_t *config);
/* transformers' rules, one term a key (c: the config object the keys are
 * in): every term given must hold; an end below 0 is no end. */
int famdesc_is_moe_layer(const famdesc_moe_layers *m, const json_t *c, int layer);
/* A list of layer numbers counted from base (layer-kind-numbers): the index
 * of its first entry that names no layer of 0..layers-1, or -1 when every
 * entry does. */
int64_t famdesc_first_bad_number(const json_t *list, int64_t layers, int64_t base);
/* 1 when such a list names layer l (0-based). */
int famdesc_number_listed(const json_t *list, int64_t l, int64_t base);

#endif

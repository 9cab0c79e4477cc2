/* The Gemma-4 family's own header. Its geometry is read from config.json
 * across both schemas transformers has written: the legacy flat
 * `global_head_dim` / `num_global_key_value_heads` and the 5.15+
 * `per_layer_config` map (per-layer values win); the family's hooks (rules,
 * doctor, synth) all read the model through this one struct. */
#ifndef FF_GEMMA4_CONFIG_H
#define FF_GEMMA4_CONFIG_H

#include <jansson.h>
#include <stdint.h>

#include "family.h"
#include "ff_err.h"

#define G4_MAX_LAYERS 512

typedef struct g4_layer {
    int full;            /* full_attention (else sliding_attention) */
    int head_dim;
    int kv_heads;
    int has_kv;          /* 0 on KV-shared layers: no k/v projections at all */
    int has_v;           /* 0 on k_eq_v full layers: V is K */
    int64_t intermediate;/* dense MLP width (doubles on kv-shared layers with use_double_wide_mlp) */
} g4_layer;

typedef struct g4_geometry {
    int layers;
    int64_t hidden, vocab;
    int heads, kv_heads, head_dim;       /* sliding-layer (global) values */
    int global_head_dim, global_kv_heads;/* what full layers use; 0 = not stated */
    int k_eq_v;
    int kv_shared;                       /* num_kv_shared_layers */
    int sliding_window;
    int moe, experts, top_k;
    int64_t moe_intermediate;
    int ple;                             /* hidden_size_per_layer_input */
    int tie_embeddings;
    int has_vision, has_audio;
    int per_layer_schema;                /* config carries per_layer_config */
    int legacy_schema;                   /* config carries the flat global fields */
    g4_layer layer[G4_MAX_LAYERS];
} g4_geometry;

/* Is this config a Gemma-4 (multimodal wrapper or text-only)? */
int g4_is_gemma4(const json_t *config);
/* Reads the geometry; fails with a message naming the missing or
 * contradictory field. `strict` also requires the full-layer fields when
 * attention_k_eq_v is set (the doctor's first finding). */
int g4_read(const json_t *config, g4_geometry *g, int strict, ff_err *e);

struct dctx;
struct synth_list;

/* doctor hooks (gemma4_doctor.c) */
extern const ff_doctor_check gemma4_doctor_checks[];
extern const ff_doctor_code gemma4_doctor_codes[];
int gemma4_doctor_open(struct dctx *c, ff_err *e);
void gemma4_doctor_close(struct dctx *c);

/* Gemma-4's own synth knobs: the slots of synth_geom.own they set. */
enum {
    G4_GLOBAL_HEAD_DIM,   /* head dim on full-attention layers */
    G4_GLOBAL_KV_HEADS,   /* KV heads on full-attention layers whose V is K */
    G4_K_IS_V,            /* full-attention layers have no v_proj */
    G4_PLE,               /* per-layer input width; 0 = none */
    G4_LEGACY_SCHEMA,     /* the config's flat global fields (before transformers 5.15) */
    G4_OWN_KNOBS
};
_Static_assert(G4_OWN_KNOBS <= sizeof ((synth_geom *)0)->own / sizeof(int), "synth_geom.own is too small");

/* synth hooks (gemma4_synth.c) */
int gemma4_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e);
int gemma4_synth_tensors(const synth_geom *g, struct synth_list *l, ff_err *e);
json_t *gemma4_synth_config(const synth_geom *g);
int gemma4_synth_aux(const synth_geom *g, const char *dir, ff_err *e);

#endif

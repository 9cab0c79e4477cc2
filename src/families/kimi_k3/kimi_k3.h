/* Kimi-K3's pieces beside its rule table (kimi_k3_family.c): the config
 * arithmetic of its Kimi-Linear text model (kimi_k3_geometry.c) and the
 * synthetic checkpoint (kimi_k3_synth.c). Every function here takes the
 * text_config object, not the top-level config. */
#ifndef FF_KIMI_K3_H
#define FF_KIMI_K3_H

#include <jansson.h>

#include "family.h"
#include "synth_list.h"

/* Layer i (0-based) is KDA: i + 1 is in linear_attn_config.kda_layers. */
int k3_is_kda_layer(const json_t *text, int layer);
/* Layer i has the sparse block: num_experts set, i >= first_k_dense_replace,
 * i % moe_layer_freq == 0 (KimiDecoderLayer's rule, and vLLM's). */
int k3_is_moe_layer(const json_t *text, int layer);
/* The shape: MLA layers cache one latent a token (kv_lora_rank +
 * qk_rope_head_dim), KDA layers keep a fixed state a sequence. Refuses a
 * kda_layers / full_attn_layers entry outside 1..num_hidden_layers or in
 * both lists (a 0-based list read as 1-based shifts every layer's kind). */
int k3_geometry(const json_t *text, ff_geometry *g, ff_err *e);
/* The invariants: MLA and KDA projections by layer kind, dense and shared
 * MLPs, experts x 3 on sparse layers, one router each. */
int k3_expect(const json_t *text, ff_expect *x, ff_err *e);

extern const ff_synth_preset k3_synth_presets[];
int k3_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e);
int k3_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e);
json_t *k3_synth_config(const synth_geom *g);
int k3_synth_aux(const synth_geom *g, const char *dir, ff_err *e);

#endif

/* What Llama-style decoders share, for the families built on one (Llama,
 * Qwen, Mistral, Mixtral, GLM MoE...): the attention geometry read from a
 * flat config.json, and the synthetic attention and config basics. Names of
 * a family's own tensors stay in the family; these take the layer prefix. */
#ifndef FF_DECODER_H
#define FF_DECODER_H

#include <jansson.h>

#include "family.h"
#include "synth_list.h"

/* layers, hidden, heads, KV heads, head_dim (default hidden / heads), vocab,
 * sliding windows (Mistral's sliding_window; Qwen's use_sliding_window from
 * max_window_layers; layer_types when present), tied embeddings, and the
 * dense MLP width on every layer. MoE fields are left to the family. */
int ff_decoder_geometry(const json_t *config, ff_geometry *g, ff_err *e);

/* q/k/v/o (+ q_norm/k_norm when qk_norm, + q/k/v biases when bias) and the
 * two layer norms of decoder layer `layer` under `prefix` ("model.layers."). */
void ff_decoder_synth_attention(synth_list *l, const synth_geom *g, const char *prefix, int layer, int qk_norm,
                                int bias);
/* A dense MLP: <prefix><layer>.<mlp>.{gate,up,down}_proj of width inter. */
void ff_decoder_synth_mlp(synth_list *l, const synth_geom *g, const char *prefix, int layer, const char *mlp,
                          int64_t inter);
/* The config keys every decoder has (architectures, model_type, sizes). */
json_t *ff_decoder_synth_config(const synth_geom *g, const char *model_type, const char *architecture);
/* generation_config.json and tokenizer_config.json of a text-only model;
 * shaped as a family's synth_aux hook, so text-only families use it as is. */
int ff_decoder_synth_aux(const synth_geom *g, const char *dir, ff_err *e);
/* A preset's start: --size is tiny or real (*real says which), the knobs
 * zeroed, the MoE flag and the seed set. */
int ff_decoder_synth_begin(const char *size, int moe, synth_geom *g, int *real, ff_err *e);
/* A preset's geometry from its two sizes: --size picks *tiny or *real (a
 * table of the knobs the preset sets, .moe included; the rest stay 0), and
 * the seed is 1. */
int ff_decoder_synth_sized(const char *size, const synth_geom *tiny, const synth_geom *real, synth_geom *g,
                           ff_err *e);
/* Routed experts stored as one 2-D Linear each (llm-compressor's and
 * vLLM's per-expert names): <prefix><layer>.<experts>.<e>.<name>.weight
 * for every expert e, names in save order; names[down] is the down
 * projection [hidden, moe_intermediate], the others [moe_intermediate,
 * hidden]. */
void ff_decoder_synth_experts(synth_list *l, const synth_geom *g, const char *prefix, int layer, const char *experts,
                              const char *const names[3], int down);
/* The invariants of a decoder with MoE layers: dense_linears quantized 2-D
 * Linears (the family's count), `experts` routed experts (x 3 Linears) on
 * each of g->moe_layers layers, `routers` router Linears kept. */
void ff_decoder_moe_expect(const ff_geometry *g, int64_t dense_linears, int64_t experts, int64_t routers,
                           ff_expect *x);
/* The checks a decoder synth needs: sizes positive, widths multiples of 16. */
int ff_decoder_synth_check(const synth_geom *g, ff_err *e);

/* Multi-token-prediction layers (model.layers.N with N >= num_hidden_layers,
 * as GLM-4.5 and DeepSeek-V3 store them): vLLM's main loader skips them and
 * only its MTP drafter reads them, so they are kept byte for byte, their
 * Linears in ignore. An override_rule hook for those families; NULL for
 * every other tensor. */
const ff_rule *ff_decoder_mtp_rule(const json_t *config, const char *name);

#endif

/* What the DeepSeek-V3 lineage shares (DeepSeek-V3/R1/V3.1, Kimi-K2,
 * DeepSeek-V3.2, GLM-4.7-Flash, GLM-5): multi-head latent attention, a routed
 * MoE with shared experts and a sigmoid router with a correction bias, dense
 * leading layers, and MTP layers past num_hidden_layers. Each family keeps its
 * own rule table, presets and config keys in its folder; this holds the rows,
 * the config arithmetic and the synth pieces they have in common.
 *
 * vLLM 0.32's deepseek_v2.py fuses q_a_proj and kv_a_proj_with_mqa into one
 * fused_qkv_a_proj (a MergedColumnParallelLinear) when q_lora_rank is set, so
 * the two share one global scale ("qkv_a"); kv_b_proj is quantized too (vLLM's
 * MLA dequantizes it after loading to build W_UK / W_UV, whatever the scheme).
 * The router mlp.gate and its e_score_correction_bias never quantize. Each
 * family's description (its desc_text) holds these rows. */
#ifndef FF_MLA_H
#define FF_MLA_H

#include <jansson.h>

#include "family.h"
#include "synth_list.h"

/* The rows every MLA family's description shares (its desc_text), under its
 * layer prefix $(L): q_a + kv_a tied, the routed and shared experts, the
 * router and its correction bias, dense MLPs. */
#define FF_MLA_DESCRIPTION_ROWS \
    "quant $(L)self_attn[.](q_a_proj|kv_a_proj_with_mqa)[.]weight$ group=attention fuse=qkv_a\n" \
    "quant $(L)self_attn[.](q_proj|q_b_proj|kv_b_proj|o_proj)[.]weight$ group=attention\n" \
    "expert $(L)mlp[.]experts[.][0-9]+[.](gate|up)_proj[.]weight$ fuse=gate_up\n" \
    "expert $(L)mlp[.]experts[.][0-9]+[.]down_proj[.]weight$\n" \
    "router $(L)mlp[.]gate[.]weight$\n" \
    "keep $(L)mlp[.]gate[.]e_score_correction_bias$ group=router guard=router\n" \
    "quant $(L)mlp[.]shared_experts[.](gate|up)_proj[.]weight$ group=shared_expert fuse=gate_up\n" \
    "quant $(L)mlp[.]shared_experts[.]down_proj[.]weight$ group=shared_expert\n" \
    "quant $(L)mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n" \
    "quant $(L)mlp[.]down_proj[.]weight$ group=mlp\n"

/* Sparse unless among the first first_k_dense_replace, every moe_layer_freq-th. */
int mla_is_moe_layer(const json_t *config, int layer);

/* Decoder geometry with MLA's cache: vLLM caches one latent per token and
 * layer, kv_lora_rank + qk_rope_head_dim wide, not K and V per head. fit
 * counts K and V (two tensors of kv_heads x head_dim), so a layer is
 * described as one KV head of half that width: the bytes per token are the
 * latent's exactly. */
int mla_geometry(const json_t *config, ff_geometry *g, ff_err *e);

/* The invariants: the five (or four, without q_lora_rank) attention Linears,
 * dense MLPs, shared experts, experts x 3 on sparse layers, one router per
 * sparse layer; plus extra_dense quantized Linears the family adds (the
 * sparse-attention indexer's wq_b). */
int mla_expect(const json_t *config, int64_t extra_dense, ff_expect *x, ff_err *e);

/* MLA widths from the synth head width (the published 128: rope 64, kv_lora
 * 512, q_lora 1536); nope and v heads are head_dim wide. */
typedef struct mla_widths { int64_t q_lora, kv_lora, rope, nope, v; } mla_widths;
mla_widths mla_widths_of(const synth_geom *g);

/* synth: one decoder layer's attention and norms, and its MLP (dense in the
 * first g->dense_layers, else router + correction bias + experts + shared). */
void mla_synth_attention(const synth_geom *g, synth_list *l, int layer);
void mla_synth_mlp(const synth_geom *g, synth_list *l, int layer);
/* synth: every decoder layer and the MTP layers after them (the drafter's
 * embed_tokens, enorm, hnorm, eh_proj, a decoder layer, shared_head), each
 * layer's attention followed by `extra` (may be NULL: the family's own
 * per-layer tensors, such as the sparse-attention indexer). */
void mla_synth_layers(const synth_geom *g, synth_list *l, void (*extra)(const synth_geom *, synth_list *, int));
/* The config keys of the lineage (MLA widths, MoE, routing, MTP). */
json_t *mla_synth_config(const synth_geom *g, const char *model_type, const char *architecture);
/* Checks the synth knobs an MLA decoder needs. */
int mla_synth_check(const synth_geom *g, ff_err *e);

#endif

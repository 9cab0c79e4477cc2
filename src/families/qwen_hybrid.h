/* What Qwen's hybrid decoders share (Qwen3.5 / 3.6 and Qwen3-Next): Gated-
 * DeltaNet linear-attention layers between full-attention ones, and a
 * Qwen2-MoE style sparse block (routed experts, one shared expert and its
 * sigmoid gate). The two families name their tensors in their own folders;
 * this holds the config arithmetic and the synth pieces they have in common,
 * each taking the layer prefix and the family's own projection names. */
#ifndef FF_QWEN_HYBRID_H
#define FF_QWEN_HYBRID_H

#include <jansson.h>

#include "family.h"
#include "synth_list.h"

/* The sparse block both hybrids' descriptions share (desc_text), under their
 * layer prefix $(L): experts one by one or fused 3-D (split per expert into
 * the names vLLM's loaders map to w13 / w2), each expert's gate/up sharing a
 * scale; the router and the shared-expert gate kept (quantized, they serve
 * NaN); the shared expert and dense MLPs quantized. */
#define FF_QWEN_SPARSE_DESCRIPTION_ROWS \
    "expert $(L)mlp[.]experts[.][0-9]+[.](gate|up)_proj[.]weight$ fuse=gate_up\n" \
    "expert $(L)mlp[.]experts[.][0-9]+[.]down_proj[.]weight$\n" \
    "experts $(L)mlp[.]experts[.]gate_up_proj$ layout=fused2 out=gate_proj,up_proj\n" \
    "experts $(L)mlp[.]experts[.]down_proj$ layout=one out=down_proj\n" \
    "router $(L)mlp[.]gate[.]weight$\n" \
    "router $(L)mlp[.]shared_expert_gate[.]weight$\n" \
    "quant $(L)mlp[.]shared_expert[.](gate|up)_proj[.]weight$ group=shared_expert fuse=gate_up\n" \
    "quant $(L)mlp[.]shared_expert[.]down_proj[.]weight$ group=shared_expert\n" \
    "quant $(L)mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n" \
    "quant $(L)mlp[.]down_proj[.]weight$ group=mlp\n"

/* The multi-token-prediction head mtp.* (fc, one decoder layer, norms):
 * vLLM's MTP drafter reads it and transformers drops it, so it is kept byte
 * for byte, its Linears in ignore, fused experts by their per-expert names. */
#define FF_QWEN_MTP_DESCRIPTION_ROWS \
    "keep ^mtp[.].*[.]mlp[.]experts[.]gate_up_proj$ group=mtp guard=fixed out=gate_proj,up_proj linear\n" \
    "keep ^mtp[.].*[.]mlp[.]experts[.]down_proj$ group=mtp guard=fixed out=down_proj linear\n" \
    "keep ^mtp[.].*norm[a-z_]*[.]weight$ group=mtp guard=fixed\n" \
    "keep ^mtp[.].*[.]weight$ group=mtp guard=fixed linear\n" \
    "keep ^mtp[.] group=mtp guard=fixed\n"

/* The text model's config: text_config of a ...ForConditionalGeneration, or
 * the config itself. */
const json_t *qh_text_config(const json_t *config);

/* transformers' rule (Qwen2-MoE lineage): a layer is sparse unless listed in
 * mlp_only_layers, when experts exist and (layer + 1) % decoder_sparse_step
 * == 0. */
int qh_is_moe_layer(const json_t *text, int layer);

/* Decoder geometry plus the MoE fields, from the text config (a family's
 * geometry hook; the full-attention layers are those without a state). */
int qh_geometry(const json_t *config, ff_geometry *g, ff_err *e);

/* The invariants: q/k/v/o on full-attention layers, gate/up/down on dense
 * layers and the shared expert, experts x 3 on sparse layers, the router
 * and the shared-expert gate kept. Linear-attention projections are kept
 * (llm-compressor's examples ignore them), so they count for nothing here. */
int qh_expect(const json_t *config, ff_expect *x, ff_err *e);

/* synth: one MoE block (router, experts, shared expert, its gate) of decoder
 * layer `layer` under `prefix`; experts one by one, or fused 3-D as the
 * published Qwen3.5 bf16 checkpoints store them. */
void qh_synth_moe(synth_list *l, const synth_geom *g, const char *prefix, int layer, int fused);
/* synth: the full-attention layer's q/k/v/o with q twice as wide (it
 * carries the output gate) and q/k norms, plus the layer norms. */
void qh_synth_gated_attention(synth_list *l, const synth_geom *g, const char *prefix, int layer);
/* synth: conv1d, A_log, dt_bias and the gated norm of a linear-attention
 * layer (the projections are the family's own). */
void qh_synth_linear_state(synth_list *l, const synth_geom *g, const char *prefix, int layer);
/* The widths a linear-attention layer's projections produce. */
int64_t qh_linear_qkv_width(const synth_geom *g);
int64_t qh_linear_v_width(const synth_geom *g);
/* Is layer i full attention in a synth of full_every? (the last always is) */
int qh_synth_full(const synth_geom *g, int layer);
/* The text-config keys both families share (layer types, linear attention,
 * MoE), added to c. */
void qh_synth_config_keys(json_t *c, const synth_geom *g);
/* Checks the synth knobs of a hybrid model. */
int qh_synth_check(const synth_geom *g, ff_err *e);

#endif

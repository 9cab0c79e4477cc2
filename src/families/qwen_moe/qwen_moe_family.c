/* Qwen MoE: Qwen3MoeForCausalLM (qwen3_moe) and Qwen2MoeForCausalLM
 * (qwen2_moe, which adds one shared expert and its sigmoid gate per layer).
 * Experts come in either layout: one Linear per expert as the published
 * checkpoints store them (model.layers.N.mlp.experts.E.{gate,up,down}_proj),
 * or fused 3-D as transformers 5.x holds them (mlp.experts.gate_up_proj
 * [E, 2I, H], mlp.experts.down_proj [E, H, I]), split into the per-expert
 * names vLLM's Qwen MoE loaders map to w13/w2. The router mlp.gate and the
 * shared-expert gate never quantize: a quantized router serves NaN. Each
 * expert's gate/up share one global scale (vLLM fuses them into w13). */
#include <stdio.h>
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"

/* The family as data (docs/family-files.md); "[.]" is a literal dot. */
static const char qwen_moe_description[] =
    "format 1\n"
    "family qwen_moe\n"
    "model-type qwen3_moe qwen2_moe\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    "quant $(L)self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant $(L)self_attn[.]o_proj[.]weight$ group=attention\n"
    "expert $(L)mlp[.]experts[.][0-9]+[.](gate|up)_proj[.]weight$ fuse=gate_up\n"
    "expert $(L)mlp[.]experts[.][0-9]+[.]down_proj[.]weight$\n"
    "experts $(L)mlp[.]experts[.]gate_up_proj$ layout=fused2 out=gate_proj,up_proj\n"
    "experts $(L)mlp[.]experts[.]down_proj$ layout=one out=down_proj\n"
    "router $(L)mlp[.]gate[.]weight$\n"
    "router $(L)mlp[.]shared_expert_gate[.]weight$\n"
    /* the shared expert is an ordinary MLP vLLM runs beside the experts */
    "quant $(L)mlp[.]shared_expert[.](gate|up)_proj[.]weight$ group=shared_expert fuse=gate_up\n"
    "quant $(L)mlp[.]shared_expert[.]down_proj[.]weight$ group=shared_expert\n"
    /* dense layers (mlp_only_layers, decoder_sparse_step) */
    "quant $(L)mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n"
    "quant $(L)mlp[.]down_proj[.]weight$ group=mlp\n"
    "keep $(L)self_attn[.][qkv]_proj[.]bias$ group=bias\n"
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    /* the published configs say num_experts; transformers 5.17 writes
     * Qwen3-MoE's as num_local_experts */
    "experts-key num_experts num_local_experts\n"
    "top-k-key num_experts_per_tok\n"
    "expert-width-key moe_intermediate_size\n"
    /* transformers' rule (Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer) */
    "moe-layers step=decoder_sparse_step except=mlp_only_layers\n"
    "dense-per-layer 7\n"
    "dense-per-moe-layer 4\n"
    "routers-per-moe-layer 1\n"
    /* Qwen2-MoE's shared expert: 3 Linears and a sigmoid gate kept like the router */
    "shared-expert shared_expert_intermediate_size dense=3 routers=1\n"
    "implicit-ignore lm_head\n";

/* ---- synth: the published layout (one Linear per expert) ---------------- */

static const ff_synth_preset qwen_moe_presets[] = {
    {"qwen3-moe", "Qwen3-MoE (real: Qwen3-30B-A3B, 48 layers x 128 experts)"},
    {"qwen2-moe", "Qwen2-MoE with a shared expert (real: Qwen1.5-MoE-A2.7B, 24 layers x 60 experts)"},
    {NULL, NULL},
};

static const synth_geom qwen3_moe_real = {   /* Qwen3-30B-A3B */
    .moe = 1, .layers = 48, .hidden = 2048, .intermediate = 6144, .vocab = 151936, .heads = 32, .kv_heads = 4,
    .head_dim = 128, .experts = 128, .top_k = 8, .moe_intermediate = 768,
};
static const synth_geom qwen2_moe_real = {   /* Qwen1.5-MoE-A2.7B */
    .moe = 1, .layers = 24, .hidden = 2048, .intermediate = 5632, .vocab = 151936, .heads = 16, .kv_heads = 16,
    .head_dim = 128, .experts = 60, .top_k = 4, .moe_intermediate = 1408, .shared_intermediate = 5632,
};
static const synth_geom qwen3_moe_tiny = {
    .moe = 1, .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 2,
    .head_dim = 64, .experts = 8, .top_k = 2, .moe_intermediate = 128,
};
static const synth_geom qwen2_moe_tiny = {
    .moe = 1, .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 2,
    .head_dim = 64, .experts = 8, .top_k = 2, .moe_intermediate = 128, .shared_intermediate = 256,
};

static int qwen_moe_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int q2 = strcmp(preset, "qwen2-moe") == 0;
    return q2 ? ff_decoder_synth_sized(size, &qwen2_moe_tiny, &qwen2_moe_real, g, e)
              : ff_decoder_synth_sized(size, &qwen3_moe_tiny, &qwen3_moe_real, g, e);
}

#define P "model.layers."

static const char *const qwen_moe_experts[3] = {"gate_proj", "up_proj", "down_proj"};

static int qwen_moe_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    int q2 = strcmp(g->preset, "qwen2-moe") == 0;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        ff_decoder_synth_attention(l, g, P, i, !q2, q2);
        if (i < g->dense_layers) {
            ff_decoder_synth_mlp(l, g, P, i, "mlp", g->intermediate);
            continue;
        }
        synth_add(l, SYNTH_NORMAL, 2, g->experts, g->hidden, 0, P "%d.mlp.gate.weight", i);
        ff_decoder_synth_experts(l, g, P, i, "mlp.experts", qwen_moe_experts, 2);
        if (g->shared_intermediate) {
            ff_decoder_synth_mlp(l, g, P, i, "mlp.shared_expert", g->shared_intermediate);
            synth_add(l, SYNTH_NORMAL, 2, 1, g->hidden, 0, P "%d.mlp.shared_expert_gate.weight", i);
        }
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *qwen_moe_synth_config(const synth_geom *g)
{
    int q2 = strcmp(g->preset, "qwen2-moe") == 0;
    json_t *c = ff_decoder_synth_config(g, q2 ? "qwen2_moe" : "qwen3_moe", q2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM");
    json_t *only = json_array();
    for (int i = 0; i < g->dense_layers; i++)
        json_array_append_new(only, json_integer(i));
    json_object_set_new(c, "decoder_sparse_step", json_integer(1));
    json_object_set_new(c, "mlp_only_layers", only);
    json_object_set_new(c, "moe_intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "norm_topk_prob", json_boolean(!q2));
    json_object_set_new(c, "num_experts", json_integer(g->experts));
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    if (q2)
        json_object_set_new(c, "shared_expert_intermediate_size", json_integer(g->shared_intermediate));
    return c;
}

static const ff_synth_knob qwen_moe_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_qwen_moe = {
    .name = "qwen_moe",
    .model_types = "qwen3_moe, qwen2_moe",
    .desc_text = qwen_moe_description,
    .synth_presets = qwen_moe_presets,
    .synth_knobs = qwen_moe_knobs,
    .synth_preset = qwen_moe_synth_preset,
    .synth_tensors = qwen_moe_synth_tensors,
    .synth_config = qwen_moe_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

/* GLM-4.5 / 4.6 MoE (Glm4MoeForCausalLM, glm4_moe). The first
 * first_k_dense_replace layers have a dense MLP; the others route over
 * n_routed_experts (model.layers.N.mlp.experts.E.{gate,up,down}_proj) plus
 * n_shared_experts folded into one MLP (mlp.shared_experts.*). The router
 * mlp.gate and its e_score_correction_bias never quantize.
 * Multi-token-prediction layers (num_nextn_predict_layers of them, at indices
 * num_hidden_layers and up: enorm, hnorm, eh_proj, shared_head and a whole
 * decoder layer) are skipped by vLLM's main-model loader (skip_spec_layers in
 * glm4_moe.py) and read only by its MTP drafter; transformers does not load
 * them, so llm-compressor's output has none. fp4forge keeps them byte for
 * byte and lists their Linears in ignore, so a drafter built from this
 * output loads them unquantized instead of missing them. */
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"

/* The family as data (docs/family-files.md); "[.]" is a literal dot. */
static const char glm4_moe_description[] =
    "format 1\n"
    "family glm4_moe\n"
    "model-type glm4_moe\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    "quant $(L)self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant $(L)self_attn[.]o_proj[.]weight$ group=attention\n"
    "expert $(L)mlp[.]experts[.][0-9]+[.](gate|up)_proj[.]weight$ fuse=gate_up\n"
    "expert $(L)mlp[.]experts[.][0-9]+[.]down_proj[.]weight$\n"
    "router $(L)mlp[.]gate[.]weight$\n"
    "keep $(L)mlp[.]gate[.]e_score_correction_bias$ group=router guard=router\n"
    "quant $(L)mlp[.]shared_experts[.](gate|up)_proj[.]weight$ group=shared_expert fuse=gate_up\n"
    "quant $(L)mlp[.]shared_experts[.]down_proj[.]weight$ group=shared_expert\n"
    "quant $(L)mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n"
    "quant $(L)mlp[.]down_proj[.]weight$ group=mlp\n"
    "keep $(L)self_attn[.][qkv]_proj[.]bias$ group=bias\n"
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "experts-key n_routed_experts\n"
    "top-k-key num_experts_per_tok\n"
    "expert-width-key moe_intermediate_size\n"
    /* the first first_k_dense_replace layers have a dense MLP */
    "moe-layers first-dense=first_k_dense_replace\n"
    "dense-per-layer 7\n"
    "dense-per-moe-layer 4\n"
    "routers-per-moe-layer 1\n"
    /* n_shared_experts folded into one MLP beside the routed ones */
    "shared-expert n_shared_experts dense=3 routers=0\n"
    "mtp\n"
    "implicit-ignore lm_head\n";

/* ---- synth: the published layout, MTP layers included ------------------ */

static const ff_synth_preset glm4_moe_presets[] = {
    {"glm4-moe", "GLM-4.5 MoE (real: GLM-4.5-Air, 46 layers x 128 experts + 1 MTP layer)"},
    {NULL, NULL},
};

/* one dense layer first, one MTP layer after the last */
static const synth_geom glm4_moe_real = {   /* GLM-4.5-Air */
    .moe = 1, .dense_layers = 1, .mtp_layers = 1,
    .layers = 46, .hidden = 4096, .intermediate = 10944, .vocab = 151552, .heads = 96, .kv_heads = 8, .head_dim = 128,
    .experts = 128, .top_k = 8, .moe_intermediate = 1408, .shared_intermediate = 1408,
};
static const synth_geom glm4_moe_tiny = {
    .moe = 1, .dense_layers = 1, .mtp_layers = 1,
    .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 2, .head_dim = 64,
    .experts = 8, .top_k = 2, .moe_intermediate = 128, .shared_intermediate = 128,
};

static int glm4_moe_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    (void)preset;
    return ff_decoder_synth_sized(size, &glm4_moe_tiny, &glm4_moe_real, g, e);
}

#define P "model.layers."

static const char *const glm4_moe_experts[3] = {"gate_proj", "up_proj", "down_proj"};

static void moe_layer(const synth_geom *g, synth_list *l, int i)
{
    synth_add(l, SYNTH_NORMAL, 2, g->experts, g->hidden, 0, P "%d.mlp.gate.weight", i);
    synth_add(l, SYNTH_ONES, 1, g->experts, 0, 0, P "%d.mlp.gate.e_score_correction_bias", i);
    ff_decoder_synth_experts(l, g, P, i, "mlp.experts", glm4_moe_experts, 2);
    if (g->shared_intermediate)
        ff_decoder_synth_mlp(l, g, P, i, "mlp.shared_experts", g->shared_intermediate);
}

static int glm4_moe_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers + g->mtp_layers; i++) {
        ff_decoder_synth_attention(l, g, P, i, 0, 1);
        if (i < g->dense_layers)
            ff_decoder_synth_mlp(l, g, P, i, "mlp", g->intermediate);
        else
            moe_layer(g, l, i);
        if (i < g->layers)
            continue;
        /* the MTP drafter's own tensors (as in the published GLM-4.5 checkpoints) */
        synth_add(l, SYNTH_NORMAL, 2, g->hidden, 2 * g->hidden, 0, P "%d.eh_proj.weight", i);
        synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.enorm.weight", i);
        synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.hnorm.weight", i);
        synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.shared_head.norm.weight", i);
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *glm4_moe_synth_config(const synth_geom *g)
{
    json_t *c = ff_decoder_synth_config(g, "glm4_moe", "Glm4MoeForCausalLM");
    json_object_set_new(c, "attention_bias", json_true());
    json_object_set_new(c, "first_k_dense_replace", json_integer(g->dense_layers));
    json_object_set_new(c, "moe_intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "n_group", json_integer(1));
    json_object_set_new(c, "n_routed_experts", json_integer(g->experts));
    json_object_set_new(c, "n_shared_experts", json_integer(g->shared_intermediate ? 1 : 0));
    json_object_set_new(c, "norm_topk_prob", json_true());
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(c, "num_nextn_predict_layers", json_integer(g->mtp_layers));
    json_object_set_new(c, "partial_rotary_factor", json_real(0.5));
    json_object_set_new(c, "routed_scaling_factor", json_real(1.0));
    json_object_set_new(c, "topk_group", json_integer(1));
    json_object_set_new(c, "use_qk_norm", json_false());
    return c;
}

static const ff_synth_knob glm4_moe_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_glm4_moe = {
    .name = "glm4_moe",
    .model_types = "glm4_moe",
    .desc_text = glm4_moe_description,
    .synth_presets = glm4_moe_presets,
    .synth_knobs = glm4_moe_knobs,
    .synth_preset = glm4_moe_synth_preset,
    .synth_tensors = glm4_moe_synth_tensors,
    .synth_config = glm4_moe_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

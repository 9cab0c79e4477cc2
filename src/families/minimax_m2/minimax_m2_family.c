/* MiniMax-M2 (MiniMaxM2ForCausalLM, minimax_m2; M2, M2.1, M2.5): Mixtral's
 * layout with a sparse block on every layer, block_sparse_moe.experts.E.
 * {w1,w2,w3} (w1 the gate, w3 the up: vLLM loads them into w13, so they share
 * one global scale), the sigmoid router block_sparse_moe.gate with its
 * e_score_correction_bias (both kept: quantized, a router serves NaN), and
 * q_norm / k_norm over all heads at once. The published checkpoint is
 * FP8-block (128 x 128, weight_scale_inv) on every attention projection and
 * expert, read through the FP8-block decoder in the same pass. Quantized
 * experts are written as experts.E.{gate,up,down}_proj, the names
 * llm-compressor's linearized experts use and vLLM's expert mapping reads.
 * Layers past num_hidden_layers (MTP modules) are kept, Linears in ignore. */
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"

/* The family as data (docs/family-files.md); "[.]" is a literal dot. */
static const char minimax_m2_description[] =
    "format 1\n"
    "family minimax_m2\n"
    "model-type minimax_m2\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    "define X $(L)block_sparse_moe[.]experts[.][0-9]+[.]\n"
    "quant $(L)self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant $(L)self_attn[.]o_proj[.]weight$ group=attention\n"
    "expert $(X)w1[.]weight$ fuse=w13 out=gate_proj\n"
    "expert $(X)w3[.]weight$ fuse=w13 out=up_proj\n"
    "expert $(X)w2[.]weight$ out=down_proj\n"
    /* the output names, so verify and repair-scales find each expert's pair */
    "expert $(X)(gate|up)_proj[.]weight$ fuse=w13\n"
    "expert $(X)down_proj[.]weight$\n"
    "router $(L)block_sparse_moe[.]gate[.]weight$\n"
    "keep $(L)block_sparse_moe[.]e_score_correction_bias$ group=router guard=router\n"
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    /* every layer sparse; the config calls the expert width intermediate_size */
    "experts-key num_local_experts\n"
    "top-k-key num_experts_per_tok\n"
    "expert-width-key intermediate_size\n"
    "moe-layers all\n"
    "dense-per-layer 0\n"
    "dense-per-moe-layer 4\n"
    "routers-per-moe-layer 1\n"
    "mtp\n"
    "implicit-ignore lm_head\n";

/* ---- synth: the published layout (FP8-block with synth --source fp8-block) */

static const ff_synth_preset minimax_m2_presets[] = {
    {"minimax-m2", "MiniMax-M2 (real: 230B, 62 layers x 256 experts; --source fp8-block as published)"},
    {NULL, NULL},
};

static const synth_geom minimax_m2_real = {   /* MiniMax-M2 */
    .moe = 1, .layers = 62, .hidden = 3072, .moe_intermediate = 1536, .vocab = 200064,
    .heads = 48, .kv_heads = 8, .head_dim = 128, .experts = 256, .top_k = 8,
};
static const synth_geom minimax_m2_tiny = {
    .moe = 1, .layers = 4, .hidden = 256, .moe_intermediate = 256, .vocab = 2048,
    .heads = 4, .kv_heads = 2, .head_dim = 64, .experts = 8, .top_k = 2,
};

static int minimax_m2_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    (void)preset;
    int rc = ff_decoder_synth_sized(size, &minimax_m2_tiny, &minimax_m2_real, g, e);
    if (rc)
        return rc;
    g->intermediate = g->moe_intermediate;   /* the config calls the expert width intermediate_size */
    return FF_OK;
}

#define P "model.layers."

/* Mixtral's names: w1 the gate, w2 the down, w3 the up projection */
static const char *const minimax_m2_experts[3] = {"w1", "w2", "w3"};

static void attention(const synth_geom *g, synth_list *l, int i)
{
    int64_t H = g->hidden, q = (int64_t)g->heads * g->head_dim, kv = (int64_t)g->kv_heads * g->head_dim;
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, P "%d.input_layernorm.weight", i);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, P "%d.post_attention_layernorm.weight", i);
    synth_add(l, SYNTH_ONES, 1, kv, 0, 0, P "%d.self_attn.k_norm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, kv, H, 0, P "%d.self_attn.k_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, H, q, 0, P "%d.self_attn.o_proj.weight", i);
    synth_add(l, SYNTH_ONES, 1, q, 0, 0, P "%d.self_attn.q_norm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, q, H, 0, P "%d.self_attn.q_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, kv, H, 0, P "%d.self_attn.v_proj.weight", i);
}

static int minimax_m2_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    int64_t H = g->hidden;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, H, 0, "lm_head.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, H, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        synth_add(l, SYNTH_ONES, 1, g->experts, 0, 0, P "%d.block_sparse_moe.e_score_correction_bias", i);
        ff_decoder_synth_experts(l, g, P, i, "block_sparse_moe.experts", minimax_m2_experts, 1);
        synth_add(l, SYNTH_NORMAL, 2, g->experts, H, 0, P "%d.block_sparse_moe.gate.weight", i);
        attention(g, l, i);
    }
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "model.norm.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

/* The published config's keys vLLM reads beyond transformers' (rotary_dim,
 * scoring_func, use_routing_bias, the qk-norm kind). */
static json_t *minimax_m2_synth_config(const synth_geom *g)
{
    json_t *c = ff_decoder_synth_config(g, "minimax_m2", "MiniMaxM2ForCausalLM");
    json_object_set_new(c, "intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(c, "num_local_experts", json_integer(g->experts));
    json_object_set_new(c, "partial_rotary_factor", json_real(0.5));
    json_object_set_new(c, "qk_norm_type", json_string("per_layer"));
    json_object_set_new(c, "rotary_dim", json_integer(g->head_dim / 2));
    json_object_set_new(c, "scoring_func", json_string("sigmoid"));
    json_object_set_new(c, "use_qk_norm", json_true());
    json_object_set_new(c, "use_routing_bias", json_true());
    return c;
}

/* synth flags: the expert width is --moe-intermediate (the config's intermediate_size): no dense MLP to set */
static const ff_synth_knob minimax_m2_knobs[] = {
    FF_KNOB_LAYERS, FF_KNOB_HIDDEN, FF_KNOB_HEADS, FF_KNOB_KV_HEADS, FF_KNOB_HEAD_DIM, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_minimax_m2 = {
    .name = "minimax_m2",
    .model_types = "minimax_m2",
    .desc_text = minimax_m2_description,
    .synth_presets = minimax_m2_presets,
    .synth_knobs = minimax_m2_knobs,
    .synth_preset = minimax_m2_synth_preset,
    .synth_tensors = minimax_m2_synth_tensors,
    .synth_config = minimax_m2_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

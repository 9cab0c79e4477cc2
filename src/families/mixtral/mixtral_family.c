/* Mixtral (MixtralForCausalLM): Llama attention and a sparse MoE block on
 * every layer, model.layers.N.block_sparse_moe.experts.E.{w1,w2,w3} (w1 the
 * gate, w3 the up, w2 the down projection: vLLM loads them into w13/w2, so
 * each expert's w1 and w3 share one global scale) and the router
 * block_sparse_moe.gate, which never quantizes. transformers 5.17 saves this
 * layout (checked by saving a tiny model). The quantized experts are written
 * as experts.E.{gate,up,down}_proj, as llm-compressor writes them. */
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"

/* The family as data (docs/family-files.md); "[.]" is a literal dot. */
static const char mixtral_description[] =
    "format 1\n"
    "family mixtral\n"
    "model-type mixtral\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    "define X $(L)block_sparse_moe[.]experts[.][0-9]+[.]\n"
    "quant $(L)self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant $(L)self_attn[.]o_proj[.]weight$ group=attention\n"
    /* written under the names llm-compressor's linearized experts use and
     * vLLM's Mixtral mapper reads (.gate_proj. -> .w1.): transformers + CT
     * load them too, which w1/w3/w2 quantized tensors do not */
    "expert $(X)w1[.]weight$ fuse=w13 out=gate_proj\n"
    "expert $(X)w3[.]weight$ fuse=w13 out=up_proj\n"
    "expert $(X)w2[.]weight$ out=down_proj\n"
    /* the same experts under their output names, so verify and repair-scales
     * find each expert's gate/up pair in a quantized checkpoint */
    "expert $(X)(gate|up)_proj[.]weight$ fuse=w13\n"
    "expert $(X)down_proj[.]weight$\n"
    "router $(L)block_sparse_moe[.]gate[.]weight$\n"
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    /* every layer sparse; the config calls the expert width intermediate_size */
    "experts-key num_local_experts\n"
    "expert-width-key intermediate_size\n"
    "moe-layers all\n"
    "dense-per-layer 0\n"
    "dense-per-moe-layer 4\n"
    "routers-per-moe-layer 1\n"
    "implicit-ignore lm_head\n";

static const ff_synth_preset mixtral_presets[] = {
    {"mixtral", "Mixtral (real: Mixtral-8x7B, 32 layers x 8 experts)"},
    {NULL, NULL},
};

static const synth_geom mixtral_real = {   /* Mixtral-8x7B */
    .moe = 1, .layers = 32, .hidden = 4096, .moe_intermediate = 14336, .vocab = 32000,
    .heads = 32, .kv_heads = 8, .head_dim = 128, .experts = 8, .top_k = 2,
};
static const synth_geom mixtral_tiny = {
    .moe = 1, .layers = 4, .hidden = 256, .moe_intermediate = 512, .vocab = 2048,
    .heads = 4, .kv_heads = 2, .head_dim = 64, .experts = 8, .top_k = 2,
};

static int mixtral_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    (void)preset;
    int rc = ff_decoder_synth_sized(size, &mixtral_tiny, &mixtral_real, g, e);
    if (rc)
        return rc;
    g->intermediate = g->moe_intermediate;   /* Mixtral's config calls the expert width intermediate_size */
    return FF_OK;
}

#define P "model.layers."

/* w1 the gate, w2 the down, w3 the up projection, saved in that order */
static const char *const mixtral_experts[3] = {"w1", "w2", "w3"};

static int mixtral_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        ff_decoder_synth_attention(l, g, P, i, 0, 0);
        synth_add(l, SYNTH_NORMAL, 2, g->experts, g->hidden, 0, P "%d.block_sparse_moe.gate.weight", i);
        ff_decoder_synth_experts(l, g, P, i, "block_sparse_moe.experts", mixtral_experts, 1);
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *mixtral_synth_config(const synth_geom *g)
{
    json_t *c = ff_decoder_synth_config(g, "mixtral", "MixtralForCausalLM");
    json_object_set_new(c, "intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(c, "num_local_experts", json_integer(g->experts));
    json_object_set_new(c, "router_aux_loss_coef", json_real(0.02));
    json_object_set_new(c, "sliding_window", json_null());
    return c;
}

/* synth flags: the expert width is --moe-intermediate (the config's intermediate_size): no dense MLP to set */
static const ff_synth_knob mixtral_knobs[] = {
    FF_KNOB_LAYERS, FF_KNOB_HIDDEN, FF_KNOB_HEADS, FF_KNOB_KV_HEADS, FF_KNOB_HEAD_DIM, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_mixtral = {
    .name = "mixtral",
    .model_types = "mixtral",
    .desc_text = mixtral_description,
    .synth_presets = mixtral_presets,
    .synth_knobs = mixtral_knobs,
    .synth_preset = mixtral_synth_preset,
    .synth_tensors = mixtral_synth_tensors,
    .synth_config = mixtral_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

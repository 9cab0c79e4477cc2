/* gpt-oss (GptOssForCausalLM, gpt_oss): every layer a MoE of
 * num_local_experts experts (width intermediate_size) behind a router with a
 * bias, attention with biases on q/k/v/o and a learned sink per head,
 * sliding and full layers alternating. OpenAI ships the experts in MXFP4 in
 * its own layout (src/io/gptoss.h), which fp4forge reads as llm-compressor
 * 0.14 linearizes the model: experts.<e>.{gate,up,down}_proj with weight and
 * bias, gate/up of an expert sharing one global scale, q/k/v one. Kept: the
 * router (weight and bias; vLLM's GateLinear takes no quant config), the
 * biases, the sinks, norms, embeddings and lm_head.
 *
 * Serving: vLLM 0.32 cannot load a compressed-tensors NVFP4 gpt-oss.
 * model_executor/models/gpt_oss.py sends compressed-tensors to
 * _load_weights_other, written for the bf16 fused layout: the NVFP4 MoE
 * method (CompressedTensorsW4A4Nvfp4MoEMethod) registers no w13/w2 bias,
 * llm-compressor's per-expert names have no mapping (skipped, except
 * down_proj.bias: KeyError 'layers.0.mlp.experts.0.w2_bias'), and no route
 * exists for the experts' global scales. llm-compressor dropped its gpt-oss
 * example for the same reason (#2742: "no pathway for running in vllm beyond
 * the original mxfp4 format"). The output is what llm-compressor writes;
 * the plan says vLLM will not load it. */
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"
#include "synth_list.h"


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char gpt_oss_description[] =
    "format 1\n"
    "family gpt_oss\n"
    "model-type gpt_oss\n"
    "quant ^model[.]layers[.][0-9]+[.]self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant ^model[.]layers[.][0-9]+[.]self_attn[.]o_proj[.]weight$ group=attention\n"
    "keep ^model[.]layers[.][0-9]+[.]self_attn[.](q|k|v|o)_proj[.]bias$ group=bias\n"
    "keep ^model[.]layers[.][0-9]+[.]self_attn[.]sinks$ group=attention\n"
    "router ^model[.]layers[.][0-9]+[.]mlp[.]router[.]weight$\n"
    "keep ^model[.]layers[.][0-9]+[.]mlp[.]router[.]bias$ group=router guard=router\n"
    "expert ^model[.]layers[.][0-9]+[.]mlp[.]experts[.][0-9]+[.](gate|up)_proj[.]weight$ fuse=gate_up\n"
    "expert ^model[.]layers[.][0-9]+[.]mlp[.]experts[.][0-9]+[.]down_proj[.]weight$\n"
    "keep ^model[.]layers[.][0-9]+[.]mlp[.]experts[.][0-9]+[.](gate|up|down)_proj[.]bias$ group=bias\n"
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "experts-key num_local_experts\n"
    "top-k-key num_experts_per_tok\n"
    "expert-width-key intermediate_size\n"
    "moe-layers all\n"
    "dense-per-layer 0\n"
    "dense-per-moe-layer 4\n"
    "routers-per-moe-layer 1\n"
    "implicit-ignore lm_head\n"
    "note vLLM 0.32 cannot load a compressed-tensors NVFP4 gpt-oss (gpt_oss.py has no path for the experts' "
    "biases or global scales); this output is llm-compressor's layout, for transformers\n";

static int gpt_oss_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "gpt_oss") == 0;
}

/* ---- synth: OpenAI's published layout (experts in MXFP4), or the bf16 copy
 * transformers saves of it (experts fused and transposed) ---------------- */

static const ff_synth_preset gpt_oss_presets[] = {
    {"gpt-oss-20b", "gpt-oss-20b (real: 24 layers, 32 experts of 2880, top-4; experts MXFP4 as published)"},
    {"gpt-oss-120b", "gpt-oss-120b (real: 36 layers, 128 experts of 2880, top-4; experts MXFP4 as published)"},
    {"gpt-oss-20b-bf16", "gpt-oss-20b as transformers saves it in bf16 (experts fused [E, H, 2I] / [E, I, H])"},
    {"gpt-oss-120b-bf16", "gpt-oss-120b as transformers saves it in bf16 (experts fused [E, H, 2I] / [E, I, H])"},
    {NULL, NULL},
};

static int bf16_layout(const synth_geom *g) { return strstr(g->preset, "-bf16") != NULL; }

static int gpt_oss_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int real, big = strncmp(preset, "gpt-oss-120b", 12) == 0, rc = ff_decoder_synth_begin(size, 1, g, &real, e);
    if (rc)
        return rc;
    if (real) {
        g->layers = big ? 36 : 24; g->hidden = 2880; g->intermediate = 2880; g->vocab = 201088;
        g->heads = 64; g->kv_heads = 8; g->head_dim = 64;
        g->experts = big ? 128 : 32; g->top_k = 4; g->moe_intermediate = 2880; g->sliding_window = 128;
    } else {
        g->layers = 2; g->hidden = 128; g->intermediate = 96; g->vocab = 512;
        g->heads = 4; g->kv_heads = 2; g->head_dim = 32;
        g->experts = 4; g->top_k = 2; g->moe_intermediate = 96; g->sliding_window = 128;
    }
    return FF_OK;
}

static void attention(const synth_geom *g, synth_list *l, int i)
{
    int64_t H = g->hidden, q = (int64_t)g->heads * g->head_dim, kv = (int64_t)g->kv_heads * g->head_dim;
    static const char *const names[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        synth_add(l, SYNTH_NORMAL, 2, k ? kv : q, H, 0, "model.layers.%d.self_attn.%s_proj.weight", i, names[k]);
        synth_add(l, SYNTH_NORMAL, 1, k ? kv : q, 0, 0, "model.layers.%d.self_attn.%s_proj.bias", i, names[k]);
    }
    synth_add(l, SYNTH_NORMAL, 2, H, q, 0, "model.layers.%d.self_attn.o_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 1, H, 0, 0, "model.layers.%d.self_attn.o_proj.bias", i);
    synth_add(l, SYNTH_NORMAL, 1, g->heads, 0, 0, "model.layers.%d.self_attn.sinks", i);
}

static void experts(const synth_geom *g, synth_list *l, int i)
{
    int64_t H = g->hidden, I = g->moe_intermediate, E = g->experts;
    synth_add(l, SYNTH_NORMAL, 2, E, H, 0, "model.layers.%d.mlp.router.weight", i);
    synth_add(l, SYNTH_NORMAL, 1, E, 0, 0, "model.layers.%d.mlp.router.bias", i);
    if (bf16_layout(g)) {   /* GptOssExperts' own parameters, used as x @ W */
        synth_add(l, SYNTH_NORMAL, 3, E, H, 2 * I, "model.layers.%d.mlp.experts.gate_up_proj", i);
        synth_add(l, SYNTH_NORMAL, 2, E, 2 * I, 0, "model.layers.%d.mlp.experts.gate_up_proj_bias", i);
        synth_add(l, SYNTH_NORMAL, 3, E, I, H, "model.layers.%d.mlp.experts.down_proj", i);
        synth_add(l, SYNTH_NORMAL, 2, E, H, 0, "model.layers.%d.mlp.experts.down_proj_bias", i);
        return;
    }
    synth_add_blocks(l, E, 2 * I, H / 32, "model.layers.%d.mlp.experts.gate_up_proj_blocks", i);
    synth_add(l, SYNTH_E8M0, 3, E, 2 * I, H / 32, "model.layers.%d.mlp.experts.gate_up_proj_scales", i);
    synth_add(l, SYNTH_NORMAL, 2, E, 2 * I, 0, "model.layers.%d.mlp.experts.gate_up_proj_bias", i);
    synth_add_blocks(l, E, H, I / 32, "model.layers.%d.mlp.experts.down_proj_blocks", i);
    synth_add(l, SYNTH_E8M0, 3, E, H, I / 32, "model.layers.%d.mlp.experts.down_proj_scales", i);
    synth_add(l, SYNTH_NORMAL, 2, E, H, 0, "model.layers.%d.mlp.experts.down_proj_bias", i);
}

static int gpt_oss_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    if (!bf16_layout(g) && (g->hidden % 32 || g->moe_intermediate % 32))
        return ff_fail(e, FF_EUSAGE, "gpt-oss: hidden and intermediate sizes must be multiples of 32 (MXFP4 groups)");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.layers.%d.input_layernorm.weight", i);
        attention(g, l, i);
        synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        experts(g, l, i);
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *gpt_oss_synth_config(const synth_geom *g)
{
    json_t *c = ff_decoder_synth_config(g, "gpt_oss", "GptOssForCausalLM"), *types = json_array();
    for (int i = 0; i < g->layers; i++)
        json_array_append_new(types, json_string(i % 2 ? "full_attention" : "sliding_attention"));
    json_object_set_new(c, "layer_types", types);
    /* the config calls the expert width intermediate_size (no dense MLP): --moe-intermediate sets it */
    json_object_set_new(c, "intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "num_local_experts", json_integer(g->experts));
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(c, "experts_per_token", json_integer(g->top_k));
    json_object_set_new(c, "sliding_window", json_integer(g->sliding_window));
    json_object_set_new(c, "attention_bias", json_true());
    json_object_set_new(c, "swiglu_limit", json_real(7.0));
    json_object_set_new(c, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(c, "rope_theta", json_real(150000.0));
    if (!bf16_layout(g))
        json_object_set_new(c, "quantization_config",
                            json_pack("{s:s, s:[s, s, s, s]}", "quant_method", "mxfp4", "modules_to_not_convert",
                                      "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                      "lm_head"));
    return c;
}

static const ff_synth_knob gpt_oss_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_gpt_oss = {
    .name = "gpt_oss",
    .model_types = "gpt_oss",
    .matches = gpt_oss_matches,
    .desc_text = gpt_oss_description,
    .synth_presets = gpt_oss_presets,
    .synth_knobs = gpt_oss_knobs,
    .synth_preset = gpt_oss_synth_preset,
    .synth_tensors = gpt_oss_synth_tensors,
    .synth_config = gpt_oss_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

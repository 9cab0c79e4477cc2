/* GLM-4.7-Flash (Glm4MoeLiteForCausalLM, glm4_moe_lite): GLM's MoE on
 * DeepSeek-V3's multi-head latent attention (q_a / kv_a with their norms,
 * q_b, kv_b, o; no qk-norm), the first layer dense, then routed experts with
 * one shared expert and the sigmoid router mlp.gate + e_score_correction_bias
 * (kept: quantized, a router serves NaN), and one MTP layer at index
 * num_hidden_layers that vLLM's glm4_moe_lite_mtp drafter reads and its main
 * loader skips: kept byte for byte, Linears in ignore. transformers 5.17
 * saves the experts one by one (mlp.experts.E.*) and says which layers are
 * dense in mlp_layer_types as well as first_k_dense_replace. The rows and
 * the geometry are the lineage's (src/families/mla.h). */
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"
#include "mla.h"


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char glm4_moe_lite_description[] =
    "format 1\n"
    "family glm4_moe_lite\n"
    "model-type glm4_moe_lite\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    FF_MLA_DESCRIPTION_ROWS
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore lm_head\n";

static int glm4_moe_lite_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "glm4_moe_lite") == 0;
}

static int glm4_moe_lite_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    return mla_expect(config, 0, x, e);
}

static const ff_synth_preset glm4_moe_lite_presets[] = {
    {"glm4.7-flash", "GLM-4.7-Flash (real: 47 layers, first 1 dense, 64 experts + 1 shared, 1 MTP layer)"},
    {NULL, NULL},
};

static int glm4_moe_lite_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    (void)preset;
    int real, rc = ff_decoder_synth_begin(size, 1, g, &real, e);
    if (rc)
        return rc;
    g->dense_layers = 1;
    g->mtp_layers = 1;
    if (real) {   /* GLM-4.7-Flash: q_lora 768, kv_lora 512, 20 heads */
        g->layers = 47; g->hidden = 2048; g->intermediate = 10240; g->vocab = 154880;
        g->heads = 20; g->kv_heads = 20; g->head_dim = 128;
        g->experts = 64; g->top_k = 4; g->moe_intermediate = 1536; g->shared_intermediate = 1536;
    } else {
        g->layers = 4; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 4; g->head_dim = 32;
        g->experts = 8; g->top_k = 2; g->moe_intermediate = 128; g->shared_intermediate = 128;
    }
    return FF_OK;
}

static int glm4_moe_lite_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = mla_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    mla_synth_layers(g, l, NULL);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *glm4_moe_lite_synth_config(const synth_geom *g)
{
    json_t *c = mla_synth_config(g, "glm4_moe_lite", "Glm4MoeLiteForCausalLM"), *types = json_array();
    for (int i = 0; i < g->layers; i++)
        json_array_append_new(types, json_string(i < g->dense_layers ? "dense" : "sparse"));
    json_object_set_new(c, "mlp_layer_types", types);
    json_object_set_new(c, "routed_scaling_factor", json_real(1.8));
    return c;
}

static const ff_synth_knob glm4_moe_lite_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_glm4_moe_lite = {
    .name = "glm4_moe_lite",
    .model_types = "glm4_moe_lite",
    .matches = glm4_moe_lite_matches,
    .desc_text = glm4_moe_lite_description,
    .override_rule = ff_decoder_mtp_rule,
    .expect = glm4_moe_lite_expect,
    .dense_rule = "q_a/q_b/kv_a/kv_b/o in every layer, gate/up/down in the first_k_dense_replace layers and shared experts",
    .geometry = mla_geometry,
    .synth_presets = glm4_moe_lite_presets,
    .synth_knobs = glm4_moe_lite_knobs,
    .synth_preset = glm4_moe_lite_synth_preset,
    .synth_tensors = glm4_moe_lite_synth_tensors,
    .synth_config = glm4_moe_lite_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

/* DeepSeek-V3 / R1 / V3.1 and Kimi-K2 (DeepseekV3ForCausalLM, deepseek_v3):
 * multi-head latent attention (MLA) and a routed MoE.
 *
 * Attention, per layer: q_a_proj [q_lora_rank, H] -> q_a_layernorm ->
 * q_b_proj [heads*(nope+rope), q_lora_rank] (or one q_proj when q_lora_rank
 * is null, DeepSeek-V2-Lite), kv_a_proj_with_mqa [kv_lora_rank+rope, H] ->
 * kv_a_layernorm -> kv_b_proj [heads*(nope+v), kv_lora_rank], o_proj; the
 * rows, the fused q_a / kv_a scale and the geometry are the lineage's
 * (src/families/mla.h).
 *
 * MLP: the first first_k_dense_replace layers are dense (mlp.{gate,up,down}),
 * the rest (every moe_layer_freq-th) route over n_routed_experts
 * (mlp.experts.E.{gate,up,down}_proj, each expert's gate/up sharing a scale)
 * plus n_shared_experts folded into mlp.shared_experts. The router mlp.gate
 * and its e_score_correction_bias never quantize.
 *
 * MTP (num_nextn_predict_layers, at index num_hidden_layers: embed_tokens,
 * enorm, hnorm, eh_proj, shared_head.{norm,head} and a whole decoder layer):
 * vLLM's main loader skips them (get_spec_layer_idx_from_weight_name in
 * deepseek_v2.py's load_weights); deepseek_mtp.py reads them (eh_proj is a
 * plain nn.Linear, never quantized; the mtp_block builds with the quant
 * config). transformers does not load them, so llm-compressor's output has
 * none. As for glm4_moe, fp4forge keeps them byte for byte (an FP8 source's
 * decoded to bf16) with their Linears in ignore. */
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"
#include "mla.h"


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char deepseek_v3_description[] =
    "format 1\n"
    "family deepseek_v3\n"
    "model-type deepseek_v3\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    FF_MLA_DESCRIPTION_ROWS
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore lm_head\n";

static int deepseek_v3_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "deepseek_v3") == 0;
}

static int deepseek_v3_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    return mla_expect(config, 0, x, e);
}

/* ---- synth: the published layouts (FP8-block with synth --source fp8-block) */

static const ff_synth_preset deepseek_v3_presets[] = {
    {"deepseek-v3", "DeepSeek-V3/R1 (real: 671B, 61 layers, first 3 dense, 256 experts + 1 shared, 1 MTP layer)"},
    {"kimi-k2", "Kimi-K2 (real: 1T, deepseek_v3 with 61 layers, first 1 dense, 384 experts + 1 shared, no MTP)"},
    {NULL, NULL},
};

/* MLA: as many KV heads as heads; Kimi-K2 has no MTP layer */
static const synth_geom deepseek_v3_real = {
    .moe = 1, .dense_layers = 3, .mtp_layers = 1,
    .layers = 61, .hidden = 7168, .intermediate = 18432, .vocab = 129280,
    .heads = 128, .kv_heads = 128, .head_dim = 128,
    .experts = 256, .top_k = 8, .moe_intermediate = 2048, .shared_intermediate = 2048,
};
static const synth_geom kimi_k2_real = {
    .moe = 1, .dense_layers = 1, .mtp_layers = 0,
    .layers = 61, .hidden = 7168, .intermediate = 18432, .vocab = 163840,
    .heads = 64, .kv_heads = 64, .head_dim = 128,
    .experts = 384, .top_k = 8, .moe_intermediate = 2048, .shared_intermediate = 2048,
};
static const synth_geom deepseek_v3_tiny = {
    .moe = 1, .dense_layers = 2, .mtp_layers = 1,
    .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 4, .head_dim = 32,
    .experts = 8, .top_k = 2, .moe_intermediate = 128, .shared_intermediate = 128,
};
static const synth_geom kimi_k2_tiny = {
    .moe = 1, .dense_layers = 1, .mtp_layers = 0,
    .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 4, .head_dim = 32,
    .experts = 12, .top_k = 2, .moe_intermediate = 128, .shared_intermediate = 128,
};

static int deepseek_v3_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int kimi = strcmp(preset, "kimi-k2") == 0;
    return kimi ? ff_decoder_synth_sized(size, &kimi_k2_tiny, &kimi_k2_real, g, e)
                : ff_decoder_synth_sized(size, &deepseek_v3_tiny, &deepseek_v3_real, g, e);
}

static int deepseek_v3_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = mla_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    mla_synth_layers(g, l, NULL);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *deepseek_v3_synth_config(const synth_geom *g)
{
    return mla_synth_config(g, "deepseek_v3", "DeepseekV3ForCausalLM");
}

static const ff_synth_knob deepseek_v3_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_deepseek_v3 = {
    .name = "deepseek_v3",
    .model_types = "deepseek_v3",
    .matches = deepseek_v3_matches,
    .desc_text = deepseek_v3_description,
    .override_rule = ff_decoder_mtp_rule,
    .expect = deepseek_v3_expect,
    .dense_rule = "q_a/q_b (or q)/kv_a/kv_b/o in every layer, gate/up/down in the first_k_dense_replace layers and shared experts",
    .geometry = mla_geometry,
    .synth_presets = deepseek_v3_presets,
    .synth_knobs = deepseek_v3_knobs,
    .synth_preset = deepseek_v3_synth_preset,
    .synth_tensors = deepseek_v3_synth_tensors,
    .synth_config = deepseek_v3_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};

/* Kimi-K3 (KimiK3ForConditionalGeneration, kimi_k3): a MoonViT-3D vision
 * tower and a patch-merger projector over a Kimi-Linear text model
 * (text_config.model_type kimi_linear) under "language_model.". Its layers
 * mix Kimi Delta Attention (KDA, a gated linear attention keeping a fixed
 * state per sequence) with MLA (DeepSeek's latent attention plus an output
 * gate g_proj): layer i is KDA when i + 1 is in linear_attn_config.kda_layers
 * (1-based; llm-compressor's KimiLinearConfig.is_kda_layer, vLLM's
 * kimi_linear.py:157-161). MoE as DeepSeek-V3 (first_k_dense_replace,
 * moe_layer_freq), but "latent": the routed experts block_sparse_moe.experts.E
 * .{w1,w2,w3} (gate, down, up) work in routed_expert_hidden_size, reached
 * through routed_expert_down_proj / _up_proj; shared experts at full width.
 * Moonshot ships the routed experts in MXFP4 (text_config's
 * quantization_config), which fp4forge decodes in the same pass.
 *
 * Quantize or keep, from what vLLM 0.32 builds (vllm/models/kimi_k3/nvidia):
 * - routed experts: FusedMoE with the quant config, checkpoint w1/w2/w3 mapped
 *   (model.py:1466-1476; .weight_packed renamed, :1481-1495); w1 and w3 fill
 *   one w13 GEMM, so they share a global scale (llm-compressor's (w1, w3)
 *   fusion too).
 * - shared experts: KimiMLP with the quant config (model.py:627), gate/up one
 *   gate_up_proj (:1431-1443), so tied.
 * - MLA: q_a, kv_a_proj_with_mqa and g_proj are ONE fused_qkv_a_g_proj
 *   (mla.py:218; load_weights model.py:1446-1451); q_b, kv_b, o separate.
 * - KDA: q, k, v, g, f_a, b are ONE in_proj_qkvgfab (kda.py:644; mapping
 *   model.py:1431-1445); f_b_proj and o_proj separate (kda.py:656, :806).
 *   vLLM's NVFP4 linear takes the max of a fused layer's global scales and
 *   only warns (compressed_tensors_w4a4_nvfp4.py:101-113): a member quantized
 *   under another scale is dequantized off by the ratio. So each fused layer
 *   is one tie key ("in_proj", per self_attn: a layer is MLA or KDA, never
 *   both). llm-compressor 0.14 fuses only (q_a, kv_a) and (q, k, v)
 *   (observers/helpers.py FUSED_LAYER_NAMES): its MLA g_proj and KDA g/f_a/b
 *   keep their own scales, which vLLM then serves wrong; here they are tied.
 * - dense layer-0 MLP: quantized, gate/up tied.
 * Kept (Linears listed in ignore):
 * - router block_sparse_moe.gate: GateLinear, no quant config, fp32 output
 *   (model.py:613-622); its e_score_correction_bias with it.
 * - routed_expert_{down,up}_proj: vLLM gives them the quant config
 *   (model.py:653-676), but llm-compressor's patch_kimi_k3_ignore keeps them
 *   (Moonshot's upload stores them bf16 and its ignore list forgot them), and
 *   its K3 example ignores them: kept, quantizable on request (no guard).
 * - self_attention_res_proj, mlp_res_proj, output_attn_res_proj ([1, H]):
 *   quant_config=None (model.py:982-993, :1183-1187); the KDA conv1d (no
 *   quant config, kda.py:670), A_log, dt_bias, every norm, embed_tokens,
 *   lm_head; the vision tower and mm_projector, which vLLM builds with
 *   quant_config=None under compressed-tensors (model.py:2047-2052).
 * MTP layers (index >= num_hidden_layers; vLLM's main loader skips them,
 * model.py:1711-1725) are kept byte for byte, their Linears in ignore. */
#include <string.h>

#include "decoder.h"
#include "encoder.h"
#include "family.h"
#include "jsonio.h"
#include "kimi_k3.h"

#define LM "^language_model\\.model\\.layers\\.[0-9]+\\."

/* The routed experts come first: 247,296 of the real model's ~500k names
 * match there, on the first regex tried. */
/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char kimi_k3_description[] =
    "format 1\n"
    "family kimi_k3\n"
    "model-type kimi_k3\n"
    "expert ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]experts[.][0-9]+[.](w1|w3)[.]weight$ fuse=w13\n"
    "expert ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]experts[.][0-9]+[.]w2[.]weight$\n"
    "router ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]gate[.]weight$\n"
    "keep ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]gate[.]e_score_correction_bias$ group=router guard=router\n"
    "quant ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]shared_experts[.](gate|up)_proj[.]weight$ group=shared_expert fuse=gate_up\n"
    "quant ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]shared_experts[.]down_proj[.]weight$ group=shared_expert\n"
    "keep ^language_model[.]model[.]layers[.][0-9]+[.]block_sparse_moe[.]routed_expert_(down|up)_proj[.]weight$ group=latent_moe linear\n"
    /* MLA (q_a, kv_a, g) and KDA (q, k, v, g, f_a, b) input projections */
    "quant ^language_model[.]model[.]layers[.][0-9]+[.]self_attn[.](q_a_proj|kv_a_proj_with_mqa|q_proj|k_proj|v_proj|g_proj|f_a_proj|b_proj)[.]weight$ group=attention fuse=in_proj\n"
    "quant ^language_model[.]model[.]layers[.][0-9]+[.]self_attn[.](q_b_proj|kv_b_proj|o_proj|f_b_proj|g_a_proj|g_b_proj)[.]weight$ group=attention\n"
    "keep ^language_model[.]model[.]layers[.][0-9]+[.]self_attn[.](q|k|v)_conv1d[.]weight$ group=kda guard=fixed\n"
    "keep ^language_model[.]model[.]layers[.][0-9]+[.]self_attn[.](A_log|dt_bias)$ group=kda guard=fixed\n"
    "quant ^language_model[.]model[.]layers[.][0-9]+[.]mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n"
    "quant ^language_model[.]model[.]layers[.][0-9]+[.]mlp[.]down_proj[.]weight$ group=mlp\n"
    "keep ^language_model[.]model[.]layers[.][0-9]+[.](self_attention|mlp)_res_proj[.]weight$ group=attn_res guard=fixed linear\n"
    "keep ^language_model[.]model[.]output_attn_res_proj[.]weight$ group=attn_res guard=fixed linear\n"
    "tower ^vision_tower[.]encoder[.]blocks[.][0-9]+[.](wqkv|wo|mlp[.]fc0|mlp[.]fc1)[.]weight$ group=vision linear\n"
    "tower ^vision_tower[.] group=vision\n"
    "tower ^mm_projector[.]proj[.][0-9]+[.]weight$ group=projector linear\n"
    "tower ^mm_projector[.] group=projector\n"
    "keep ^language_model[.]model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^language_model[.]lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore language_model.lm_head\n";

static int kimi_k3_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "kimi_k3") == 0;
}

static const json_t *text_of(const json_t *config, ff_err *e)
{
    const json_t *t = json_object_get(config, "text_config");
    if (!json_is_object(t))
        ff_fail(e, FF_EIO, "config.json: kimi_k3 without a text_config object");
    return json_is_object(t) ? t : NULL;
}

/* MTP layers sit at index num_hidden_layers and up: the decoder helper's
 * rule on the name without the multimodal prefix. */
static const ff_rule *kimi_k3_override(const json_t *config, const char *name)
{
    static const char text[] = "language_model.";
    const json_t *t = json_object_get(config, "text_config");
    if (!json_is_object(t) || strncmp(name, text, sizeof text - 1) != 0)
        return NULL;
    return ff_decoder_mtp_rule(t, name + sizeof text - 1);
}

static int kimi_k3_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    const json_t *t = text_of(config, e);
    return t ? k3_expect(t, x, e) : FF_EIO;
}

static int kimi_k3_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    const json_t *t = text_of(config, e);
    int rc = t ? k3_geometry(t, g, e) : FF_EIO;
    if (!rc)
        g->has_vision = json_is_object(json_object_get(config, "vision_config"));
    return rc;
}

static const ff_synth_knob kimi_k3_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_FULL_EVERY, FF_KNOB_VOCAB, FF_KNOBS_MOE, FF_KNOBS_VISION,
    FF_KNOBS_END,
};

const ff_family ff_family_kimi_k3 = {
    .name = "kimi_k3",
    .model_types = "kimi_k3",
    .matches = kimi_k3_matches,
    .desc_text = kimi_k3_description,
    .expect = kimi_k3_expect,
    .dense_rule = "MLA q_a/q_b/kv_a/kv_b/o/g and KDA q/k/v/g/f_a/f_b/b/o in their layers, gate/up/down in the "
                  "first_k_dense_replace layers and the shared experts",
    .geometry = kimi_k3_geometry,
    .override_rule = kimi_k3_override,
    .synth_presets = k3_synth_presets,
    .synth_knobs = kimi_k3_knobs,
    .synth_preset = k3_synth_preset,
    .synth_tensors = k3_synth_tensors,
    .synth_config = k3_synth_config,
    .synth_aux = k3_synth_aux,
    .encoder_bytes = ff_encoder_default_bytes,
};

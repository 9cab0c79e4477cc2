/* Qwen3.5 and Qwen3.6, MoE and dense (qwen3_5_moe, qwen3_5 and their text-
 * only _text configs): Qwen3_5[Moe]ForConditionalGeneration with the text
 * model under model.language_model. and the vision tower under model.visual.,
 * or the causal LM under model. Three layers in four are Gated-DeltaNet
 * linear attention (linear_attn.in_proj_qkv / in_proj_z / in_proj_b /
 * in_proj_a / out_proj, conv1d, A_log, dt_bias), every fourth full attention
 * whose q_proj carries the output gate (twice the heads' width).
 *
 * Quantized: full attention q/k/v/o (vLLM fuses them into one qkv_proj, so
 * one global scale), the experts (per expert on disk, as transformers 5.17
 * saves them; or fused 3-D mlp.experts.gate_up_proj [E, 2I, H] / down_proj
 * [E, H, I], split per expert), the shared expert, the dense MLP.
 * Kept: the linear-attention projections (llm-compressor's Qwen3.5 examples
 * ignore linear_attn; vLLM fuses in_proj_qkv + in_proj_z and in_proj_b +
 * in_proj_a, so --only that forces them ties each pair to one global scale),
 * the router mlp.gate and mlp.shared_expert_gate (quantized, they serve
 * NaN), the vision tower and merger, embeddings, norms, lm_head, and the
 * multi-token-prediction head mtp.* (transformers does not load it, so
 * llm-compressor's output has none; vLLM's qwen3_5_mtp drafter reads it),
 * byte for byte with its Linears in ignore. */
#include <stdio.h>
#include <string.h>

#include "decoder.h"
#include "encoder.h"
#include "family.h"
#include "jsonio.h"
#include "qwen_hybrid.h"

#define LM "^model\\.(language_model\\.)?layers\\.[0-9]+\\."


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char qwen3_5_description[] =
    "format 1\n"
    "family qwen3_5\n"
    "model-type qwen3_5_moe qwen3_5_moe_text qwen3_5 qwen3_5_text\n"
    /* a Conv3d, not a Linear */
    "tower ^model[.]visual[.]patch_embed[.] group=vision\n"
    "tower ^model[.]visual[.].*[.](qkv|proj|linear_fc[12])[.]weight$ group=vision linear\n"
    "tower ^model[.]visual[.] group=vision\n"
    FF_QWEN_MTP_DESCRIPTION_ROWS
    "quant ^model[.](language_model[.])?layers[.][0-9]+[.]self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant ^model[.](language_model[.])?layers[.][0-9]+[.]self_attn[.]o_proj[.]weight$ group=attention\n"
    "keep ^model[.](language_model[.])?layers[.][0-9]+[.]linear_attn[.]in_proj_(qkv|z)[.]weight$ group=linear_attn fuse=qkvz linear\n"
    "keep ^model[.](language_model[.])?layers[.][0-9]+[.]linear_attn[.]in_proj_(b|a)[.]weight$ group=linear_attn fuse=ba linear\n"
    "keep ^model[.](language_model[.])?layers[.][0-9]+[.]linear_attn[.]out_proj[.]weight$ group=linear_attn linear\n"
    "keep ^model[.](language_model[.])?layers[.][0-9]+[.]linear_attn[.] group=linear_attn\n"
    "define L ^model[.](language_model[.])?layers[.][0-9]+[.]\n"
    FF_QWEN_SPARSE_DESCRIPTION_ROWS
    "keep ^model[.](language_model[.])?embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore lm_head\n";

static int qwen3_5_matches(const json_t *config)
{
    static const char *const types[] = {"qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_text", NULL};
    const char *mt = jsonio_str(config, "model_type", "");
    for (int i = 0; types[i]; i++)
        if (strcmp(mt, types[i]) == 0)
            return 1;
    return 0;
}

/* ---- synth: the published layout (the image-text model, MTP head) -------- */

static const ff_synth_preset qwen3_5_presets[] = {
    {"qwen3.5-moe", "Qwen3.5 MoE with vision and MTP (real: Qwen3.5-397B-A17B, 60 layers x 512 experts)"},
    {"qwen3.6-moe", "Qwen3.6 MoE with vision and MTP (real: Qwen3.6-35B-A3B, 40 layers x 256 experts)"},
    {"qwen3.5-dense", "Qwen3.5 dense with vision and MTP (real: Qwen3.5-27B, 64 layers)"},
    {NULL, NULL},
};

static void linear_tiny(synth_geom *g)
{
    g->linear_k_heads = 2; g->linear_v_heads = 4; g->linear_k_dim = 32; g->linear_v_dim = 32; g->conv_kernel = 4;
}

static void real_geometry(const char *preset, synth_geom *g)
{
    g->conv_kernel = 4; g->linear_k_dim = 128; g->linear_v_dim = 128; g->linear_k_heads = 16;
    g->vision_layers = 27; g->vision_hidden = 1152; g->vision_intermediate = 4304; g->vision_heads = 16;
    g->vocab = 248320; g->head_dim = 256; g->mtp_layers = 1; g->ssm_fp32 = 1;
    if (strcmp(preset, "qwen3.5-moe") == 0) {          /* Qwen3.5-397B-A17B */
        g->layers = 60; g->hidden = 4096; g->heads = 32; g->kv_heads = 2; g->linear_v_heads = 64;
        g->experts = 512; g->top_k = 10; g->moe_intermediate = 1024; g->shared_intermediate = 1024;
    } else if (strcmp(preset, "qwen3.6-moe") == 0) {   /* Qwen3.6-35B-A3B */
        g->layers = 40; g->hidden = 2048; g->heads = 16; g->kv_heads = 2; g->linear_v_heads = 32;
        g->experts = 256; g->top_k = 8; g->moe_intermediate = 512; g->shared_intermediate = 512;
    } else {                                           /* Qwen3.5-27B */
        g->moe = 0;
        g->layers = 64; g->hidden = 5120; g->heads = 24; g->kv_heads = 4; g->linear_v_heads = 48;
        g->intermediate = 17408;
    }
}

static int qwen3_5_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int real, dense = strcmp(preset, "qwen3.5-dense") == 0, rc = ff_decoder_synth_begin(size, !dense, g, &real, e);
    if (rc)
        return rc;
    g->full_every = 4;
    if (real) {
        real_geometry(preset, g);
        return FF_OK;
    }
    g->layers = 4; g->hidden = 256; g->intermediate = dense ? 512 : 0; g->vocab = 2048;
    g->heads = 4; g->kv_heads = 2; g->head_dim = 64; g->mtp_layers = 1;
    g->experts = dense ? 0 : 8; g->top_k = dense ? 0 : 2;
    g->moe_intermediate = dense ? 0 : 128; g->shared_intermediate = dense ? 0 : 128;
    g->vision_layers = 1; g->vision_hidden = 64; g->vision_intermediate = 128; g->vision_heads = 2;
    g->ssm_fp32 = 1;
    linear_tiny(g);
    return FF_OK;
}

#define P "model.language_model.layers."
#define VM "model.visual."

static void vision_tensors(const synth_geom *g, synth_list *l)
{
    int64_t h = g->vision_hidden, in = g->vision_intermediate, m = 4 * h;
    for (int i = 0; i < g->vision_layers; i++) {
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "blocks.%d.attn.proj.bias", i);
        synth_add(l, SYNTH_NORMAL, 2, h, h, 0, VM "blocks.%d.attn.proj.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, 3 * h, 0, 0, VM "blocks.%d.attn.qkv.bias", i);
        synth_add(l, SYNTH_NORMAL, 2, 3 * h, h, 0, VM "blocks.%d.attn.qkv.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, in, 0, 0, VM "blocks.%d.mlp.linear_fc1.bias", i);
        synth_add(l, SYNTH_NORMAL, 2, in, h, 0, VM "blocks.%d.mlp.linear_fc1.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "blocks.%d.mlp.linear_fc2.bias", i);
        synth_add(l, SYNTH_NORMAL, 2, h, in, 0, VM "blocks.%d.mlp.linear_fc2.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "blocks.%d.norm1.bias", i);
        synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "blocks.%d.norm1.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "blocks.%d.norm2.bias", i);
        synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "blocks.%d.norm2.weight", i);
    }
    synth_add(l, SYNTH_NORMAL, 1, m, 0, 0, VM "merger.linear_fc1.bias");
    synth_add(l, SYNTH_NORMAL, 2, m, m, 0, VM "merger.linear_fc1.weight");
    synth_add(l, SYNTH_NORMAL, 1, g->hidden, 0, 0, VM "merger.linear_fc2.bias");
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, m, 0, VM "merger.linear_fc2.weight");
    synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "merger.norm.bias");
    synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "merger.norm.weight");
    synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "patch_embed.proj.bias");
    /* a Conv3d [h, 3, 2, 16, 16] on disk; synth writes its elements as [h, 6, 256] */
    synth_add(l, SYNTH_NORMAL, 3, h, 6, 256, VM "patch_embed.proj.weight");
    synth_add(l, SYNTH_NORMAL, 2, 2304, h, 0, VM "pos_embed.weight");
}

/* One decoder layer under prefix (the main model's, or the MTP head's). */
static void decoder_layer(const synth_geom *g, synth_list *l, const char *prefix, int i, int full)
{
    int64_t H = g->hidden;
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "%s%d.input_layernorm.weight", prefix, i);
    if (full) {
        qh_synth_gated_attention(l, g, prefix, i);
    } else {
        qh_synth_linear_state(l, g, prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, g->linear_v_heads, H, 0, "%s%d.linear_attn.in_proj_a.weight", prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, g->linear_v_heads, H, 0, "%s%d.linear_attn.in_proj_b.weight", prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, qh_linear_qkv_width(g), H, 0, "%s%d.linear_attn.in_proj_qkv.weight", prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, qh_linear_v_width(g), H, 0, "%s%d.linear_attn.in_proj_z.weight", prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, H, qh_linear_v_width(g), 0, "%s%d.linear_attn.out_proj.weight", prefix, i);
    }
    if (g->moe)
        qh_synth_moe(l, g, prefix, i, 1);
    else
        ff_decoder_synth_mlp(l, g, prefix, i, "mlp", g->intermediate);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "%s%d.post_attention_layernorm.weight", prefix, i);
}

static void mtp_tensors(const synth_geom *g, synth_list *l)
{
    int64_t H = g->hidden;
    synth_add(l, SYNTH_NORMAL, 2, H, 2 * H, 0, "mtp.fc.weight");
    for (int i = 0; i < g->mtp_layers; i++)
        decoder_layer(g, l, "mtp.layers.", i, 1);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "mtp.norm.weight");
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "mtp.pre_fc_norm_embedding.weight");
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "mtp.pre_fc_norm_hidden.weight");
}

static int qwen3_5_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = qh_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.language_model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++)
        decoder_layer(g, l, P, i, qh_synth_full(g, i));
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.language_model.norm.weight");
    if (g->vision_layers)
        vision_tensors(g, l);
    if (g->mtp_layers)
        mtp_tensors(g, l);
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *qwen3_5_synth_config(const synth_geom *g)
{
    const char *mt = g->moe ? "qwen3_5_moe" : "qwen3_5";
    char text_type[32];
    snprintf(text_type, sizeof text_type, "%s_text", mt);
    json_t *t = ff_decoder_synth_config(g, text_type, "unused");
    json_object_del(t, "architectures");
    if (g->moe)
        json_object_del(t, "intermediate_size");
    qh_synth_config_keys(t, g);
    json_object_set_new(t, "mtp_num_hidden_layers", json_integer(g->mtp_layers));
    json_t *c = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string(g->moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"));
    json_object_set_new(c, "architectures", arch);
    json_object_set_new(c, "model_type", json_string(mt));
    json_object_set_new(c, "text_config", t);
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "transformers_version", json_string("5.17.0"));
    if (g->vision_layers) {
        json_t *v = json_object();
        snprintf(text_type, sizeof text_type, "%s_vision", mt);
        json_object_set_new(v, "depth", json_integer(g->vision_layers));
        json_object_set_new(v, "hidden_size", json_integer(g->vision_hidden));
        json_object_set_new(v, "intermediate_size", json_integer(g->vision_intermediate));
        json_object_set_new(v, "model_type", json_string(text_type));
        json_object_set_new(v, "num_heads", json_integer(g->vision_heads));
        json_object_set_new(v, "out_hidden_size", json_integer(g->hidden));
        json_object_set_new(v, "patch_size", json_integer(16));
        json_object_set_new(v, "spatial_merge_size", json_integer(2));
        json_object_set_new(v, "temporal_patch_size", json_integer(2));
        json_object_set_new(c, "vision_config", v);
    }
    return c;
}

static int qwen3_5_synth_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    int rc = ff_decoder_synth_aux(g, dir, e);
    if (!rc && g->vision_layers)
        rc = synth_write_text(dir, "processor_config.json", "{\n  \"processor_class\": \"Qwen3VLProcessor\"\n}\n", e);
    if (!rc && g->vision_layers)
        rc = synth_write_text(dir, "preprocessor_config.json",
                              "{\n  \"image_processor_type\": \"Qwen2VLImageProcessorFast\",\n  \"patch_size\": 16\n}\n", e);
    if (!rc)
        rc = synth_write_text(dir, "chat_template.jinja",
                              "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}", e);
    return rc;
}

static const ff_synth_knob qwen3_5_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_FULL_EVERY, FF_KNOB_VOCAB, FF_KNOBS_MOE, FF_KNOBS_VISION,
    FF_KNOBS_END,
};

const ff_family ff_family_qwen3_5 = {
    .name = "qwen3_5",
    .model_types = "qwen3_5_moe, qwen3_5_moe_text, qwen3_5, qwen3_5_text",
    .matches = qwen3_5_matches,
    .desc_text = qwen3_5_description,
    .expect = qh_expect,
    .dense_rule = "q/k/v/o in full-attention layers, gate/up/down in dense layers and shared experts "
                  "(linear-attention projections kept)",
    .geometry = qh_geometry,
    .synth_presets = qwen3_5_presets,
    .synth_knobs = qwen3_5_knobs,
    .synth_preset = qwen3_5_synth_preset,
    .synth_tensors = qwen3_5_synth_tensors,
    .synth_config = qwen3_5_synth_config,
    .synth_aux = qwen3_5_synth_aux,
    .encoder_bytes = ff_encoder_default_bytes,
};

/* Kimi-K2.5 / K2.6 (KimiK25ForConditionalGeneration, kimi_k25): a vision
 * tower and projector over a DeepSeek-V3 text model (text_config.model_type
 * kimi_k2) whose tensors sit under "language_model." (vLLM 0.32
 * model_executor/models/kimi_k25.py: DeepseekV2ForCausalLM at prefix
 * language_model, hf_to_vllm_mapper also taking the older
 * "language_model.layers."). Moonshot ships it with the routed experts in
 * compressed-tensors INT4 (pack-quantized, group 32, symmetric) and the rest
 * in bf16; text_config holds that quantization_config, which the output's
 * top-level NVFP4 one replaces (src/quantize/qconfig.c).
 *
 * What is quantized is DeepSeek-V3's set (src/families/mla.h): attention
 * (q_a and kv_a_proj_with_mqa sharing a scale, as vLLM fuses them), dense
 * and shared MLPs, every routed expert; as llm-compressor's Kimi-K2.6 NVFP4
 * example does. Kept: the router (vLLM's GateLinear takes no quant config),
 * embeddings, norms, lm_head, and the vision tower and mm_projector, which
 * vLLM builds with quant_config=None under compressed-tensors. */
#include <stdio.h>
#include <string.h>

#include "decoder.h"
#include "encoder.h"
#include "family.h"
#include "jsonio.h"
#include "mla.h"
#include "synth_list.h"

#define TEXT "language_model."

/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char kimi_k25_description[] =
    "format 1\n"
    "family kimi_k25\n"
    "model-type kimi_k25\n"
    "tower ^vision_tower[.]encoder[.]blocks[.][0-9]+[.](wqkv|wo|mlp[.]fc0|mlp[.]fc1)[.]weight$ group=vision linear\n"
    "tower ^vision_tower[.] group=vision\n"
    "tower ^mm_projector[.]proj[.][0-9]+[.]weight$ group=projector linear\n"
    "tower ^mm_projector[.] group=projector\n"
    "define L ^language_model[.]model[.]layers[.][0-9]+[.]\n"
    FF_MLA_DESCRIPTION_ROWS
    "keep ^language_model[.]model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^language_model[.]lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore language_model.lm_head\n";

static int kimi_k25_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "kimi_k25") == 0;
}

static const json_t *text_of(const json_t *config, ff_err *e)
{
    const json_t *t = json_object_get(config, "text_config");
    if (!json_is_object(t))
        ff_fail(e, FF_EIO, "config.json: kimi_k25 without a text_config object");
    return json_is_object(t) ? t : NULL;
}

static int kimi_k25_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    const json_t *t = text_of(config, e);
    return t ? mla_expect(t, 0, x, e) : FF_EIO;
}

static int kimi_k25_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    const json_t *t = text_of(config, e);
    int rc = t ? mla_geometry(t, g, e) : FF_EIO;
    if (!rc)
        g->has_vision = json_is_object(json_object_get(config, "vision_config"));
    return rc;
}

/* ---- synth: Moonshot's layout (INT4 experts with synth --source int4) ------ */

static const ff_synth_preset kimi_k25_presets[] = {
    {"kimi-k2.5", "Kimi-K2.5/K2.6 (real: 1T, a kimi_k2 text model of 61 layers, first 1 dense, 384 experts + 1 shared, "
                  "under language_model.; a 27-block vision tower and mm_projector)"},
    {NULL, NULL},
};

static int kimi_k25_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int real, rc = ff_decoder_synth_begin(size, 1, g, &real, e);
    if (rc)
        return rc;
    (void)preset;
    g->dense_layers = 1;
    if (real) {
        g->layers = 61; g->hidden = 7168; g->intermediate = 18432; g->vocab = 163840;
        g->heads = 64; g->kv_heads = 64; g->head_dim = 128;
        g->experts = 384; g->top_k = 8; g->moe_intermediate = 2048; g->shared_intermediate = 2048;
        g->vision_layers = 27; g->vision_hidden = 1152; g->vision_intermediate = 4304; g->vision_heads = 16;
    } else {
        g->layers = 4; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 4; g->head_dim = 32;
        g->experts = 12; g->top_k = 2; g->moe_intermediate = 128; g->shared_intermediate = 128;
        g->vision_layers = 2; g->vision_hidden = 64; g->vision_intermediate = 128; g->vision_heads = 2;
    }
    return FF_OK;
}

/* The MoonViT tower (vLLM's kimi_k25_vit.py names) and the patch-merger
 * projector (2x2 merge: its input is 4 patches wide). */
static void vision(const synth_geom *g, synth_list *l)
{
    int64_t V = g->vision_hidden, I = g->vision_intermediate;
    synth_add_4d(l, SYNTH_NORMAL, V, 3, 14, 14, "vision_tower.patch_embed.proj.weight");   /* a Conv2d */
    synth_add(l, SYNTH_NORMAL, 1, V, 0, 0, "vision_tower.patch_embed.proj.bias");
    synth_add(l, SYNTH_NORMAL, 3, 64, 64, V, "vision_tower.patch_embed.pos_emb.weight");
    for (int b = 0; b < g->vision_layers; b++) {
        static const char *const norms[] = {"norm0", "norm1"};
        for (int k = 0; k < 2; k++) {
            synth_add(l, SYNTH_ONES, 1, V, 0, 0, "vision_tower.encoder.blocks.%d.%s.weight", b, norms[k]);
            synth_add(l, SYNTH_NORMAL, 1, V, 0, 0, "vision_tower.encoder.blocks.%d.%s.bias", b, norms[k]);
        }
        synth_add(l, SYNTH_NORMAL, 2, 3 * V, V, 0, "vision_tower.encoder.blocks.%d.wqkv.weight", b);
        synth_add(l, SYNTH_NORMAL, 1, 3 * V, 0, 0, "vision_tower.encoder.blocks.%d.wqkv.bias", b);
        synth_add(l, SYNTH_NORMAL, 2, V, V, 0, "vision_tower.encoder.blocks.%d.wo.weight", b);
        synth_add(l, SYNTH_NORMAL, 1, V, 0, 0, "vision_tower.encoder.blocks.%d.wo.bias", b);
        synth_add(l, SYNTH_NORMAL, 2, I, V, 0, "vision_tower.encoder.blocks.%d.mlp.fc0.weight", b);
        synth_add(l, SYNTH_NORMAL, 1, I, 0, 0, "vision_tower.encoder.blocks.%d.mlp.fc0.bias", b);
        synth_add(l, SYNTH_NORMAL, 2, V, I, 0, "vision_tower.encoder.blocks.%d.mlp.fc1.weight", b);
        synth_add(l, SYNTH_NORMAL, 1, V, 0, 0, "vision_tower.encoder.blocks.%d.mlp.fc1.bias", b);
    }
    synth_add(l, SYNTH_ONES, 1, V, 0, 0, "vision_tower.encoder.final_layernorm.weight");
    synth_add(l, SYNTH_NORMAL, 1, V, 0, 0, "vision_tower.encoder.final_layernorm.bias");
    synth_add(l, SYNTH_ONES, 1, V, 0, 0, "mm_projector.pre_norm.weight");
    synth_add(l, SYNTH_NORMAL, 1, V, 0, 0, "mm_projector.pre_norm.bias");
    synth_add(l, SYNTH_NORMAL, 2, 4 * V, 4 * V, 0, "mm_projector.proj.0.weight");
    synth_add(l, SYNTH_NORMAL, 1, 4 * V, 0, 0, "mm_projector.proj.0.bias");
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, 4 * V, 0, "mm_projector.proj.2.weight");
    synth_add(l, SYNTH_NORMAL, 1, g->hidden, 0, 0, "mm_projector.proj.2.bias");
}

static int kimi_k25_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = mla_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, TEXT "lm_head.weight");
    size_t text = l->n;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    mla_synth_layers(g, l, NULL);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    if (!l->oom)
        synth_prefix(l, text, TEXT);
    vision(g, l);
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *kimi_k25_synth_config(const synth_geom *g)
{
    json_t *text = mla_synth_config(g, "kimi_k2", "DeepseekV3ForCausalLM");
    /* Moonshot's vt_* keys and transformers 5.17's own (Kimi_K25VisionConfig reads
     * only the latter, vLLM too): both, as a checkpoint saved by either has them */
    json_t *vision = json_pack("{s:i, s:i, s:i, s:s, s:i, s:i, s:I, s:I, s:[i, i], s:s, s:s, s:I, s:I}",
                               "patch_size", 14, "init_pos_emb_height", 64, "init_pos_emb_width", 64,
                               "pos_emb_type", "divided_fixed", "vt_num_attention_heads", g->vision_heads,
                               "vt_num_hidden_layers", g->vision_layers, "vt_hidden_size", (json_int_t)g->vision_hidden,
                               "vt_intermediate_size", (json_int_t)g->vision_intermediate, "merge_kernel_size", 2, 2,
                               "mm_projector_type", "patchmerger", "projector_hidden_act", "gelu", "mm_hidden_size",
                               (json_int_t)g->vision_hidden, "text_hidden_size", (json_int_t)g->hidden);
    json_t *hf = json_pack("{s:s, s:I, s:I, s:i, s:i, s:i, s:i, s:i}", "model_type", "kimi_k25_vision", "hidden_size",
                           (json_int_t)g->vision_hidden, "intermediate_size", (json_int_t)g->vision_intermediate,
                           "num_attention_heads", g->vision_heads, "num_hidden_layers", g->vision_layers,
                           "pos_emb_height", 64, "pos_emb_width", 64, "pos_emb_time", 4);
    json_object_update(vision, hf);
    json_decref(hf);
    json_object_set_new(text, "tie_word_embeddings", json_false());
    return json_pack("{s:[s], s:s, s:s, s:o, s:o, s:b, s:i, s:i, s:I}", "architectures",
                     "KimiK25ForConditionalGeneration", "model_type", "kimi_k25", "dtype", "bfloat16", "text_config", text,
                     "vision_config", vision, "tie_word_embeddings", 0, "image_token_id", 163605,
                     "media_placeholder_token_id", 163605, "projection_hidden_size", (json_int_t)g->vision_hidden);
}

/* The processor files a multimodal upload carries (doctor checks them). */
static int kimi_k25_synth_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    static const char *const files[][2] = {
        {"chat_template.jinja", "{% for m in messages %}<|im_{{ m['role'] }}|>{{ m['content'] }}<|im_end|>{% endfor %}"
                                "{% if add_generation_prompt %}<|im_assistant|>{% endif %}"},
        {"processor_config.json", "{\n  \"processor_class\": \"KimiK25Processor\"\n}\n"},
        {"preprocessor_config.json", "{\n  \"image_processor_type\": \"KimiK25ImageProcessor\",\n  \"patch_size\": 14,\n"
                                     "  \"merge_kernel_size\": [2, 2]\n}\n"},
    };
    int rc = ff_decoder_synth_aux(g, dir, e);
    for (size_t i = 0; !rc && i < sizeof files / sizeof *files; i++)
        rc = synth_write_text(dir, files[i][0], files[i][1], e);
    return rc;
}

static const ff_synth_knob kimi_k25_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE, FF_KNOBS_VISION,
    FF_KNOBS_END,
};

const ff_family ff_family_kimi_k25 = {
    .name = "kimi_k25",
    .model_types = "kimi_k25",
    .matches = kimi_k25_matches,
    .desc_text = kimi_k25_description,
    .expect = kimi_k25_expect,
    .dense_rule = "q_a/q_b/kv_a/kv_b/o in every layer, gate/up/down in the first_k_dense_replace layers and shared experts",
    .geometry = kimi_k25_geometry,
    .synth_presets = kimi_k25_presets,
    .synth_knobs = kimi_k25_knobs,
    .synth_preset = kimi_k25_synth_preset,
    .synth_tensors = kimi_k25_synth_tensors,
    .synth_config = kimi_k25_synth_config,
    .synth_aux = kimi_k25_synth_aux,
    .encoder_bytes = ff_encoder_default_bytes,
};

/* Llama-4 (Llama4ForConditionalGeneration: Scout, Maverick, and the text-only
 * Llama4ForCausalLM, llama4_text). The text model lives under
 * language_model.model (model. in the text-only layout); MoE layers (text_config.moe_layers, or
 * every interleave_moe_layer_step-th) hold fused experts stored transposed
 * for a bmm, feed_forward.experts.gate_up_proj [E, H, 2I] and down_proj
 * [E, I, H], split per expert into the names vLLM's Llama-4 loader maps
 * (experts.N.{gate,up,down}_proj) and llm-compressor's linearized MoE
 * writes; beside them a shared expert (quantized, its own gate/up pair) and
 * the router feed_forward.router (never quantized). Other layers have a
 * dense feed_forward MLP. The vision model and the projector are kept. */
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "encoder.h"
#include "family.h"
#include "jsonio.h"


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char llama4_description[] =
    "format 1\n"
    "family llama4\n"
    "model-type llama4 llama4_text\n"
    "tower ^vision_model[.].*(_proj|fc[12]|linear)[.]weight$ group=vision linear\n"
    "tower ^vision_model[.] group=vision\n"
    "tower ^multi_modal_projector[.].*[.]weight$ group=projector linear\n"
    "tower ^multi_modal_projector[.] group=projector\n"
    "quant ^(language_model[.])?model[.]layers[.][0-9]+[.]self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant ^(language_model[.])?model[.]layers[.][0-9]+[.]self_attn[.]o_proj[.]weight$ group=attention\n"
    "experts ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.]experts[.]gate_up_proj$ layout=fused2-t out=gate_proj,up_proj\n"
    "experts ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.]experts[.]down_proj$ layout=one-t out=down_proj\n"
    "router ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.]router[.]weight$\n"
    "quant ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.]shared_expert[.](gate|up)_proj[.]weight$ group=shared_expert fuse=gate_up\n"
    "quant ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.]shared_expert[.]down_proj[.]weight$ group=shared_expert\n"
    "quant ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n"
    "quant ^(language_model[.])?model[.]layers[.][0-9]+[.]feed_forward[.]down_proj[.]weight$ group=mlp\n"
    "keep ^(language_model[.])?model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^(language_model[.])?lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore language_model.lm_head lm_head\n";

static int llama4_matches(const json_t *config)
{
    const char *mt = jsonio_str(config, "model_type", "");
    return strcmp(mt, "llama4") == 0 || strcmp(mt, "llama4_text") == 0;
}

static const json_t *text_of(const json_t *config)
{
    const json_t *t = json_object_get(config, "text_config");
    return json_is_object(t) ? t : config;
}

/* transformers' Llama4TextConfig: moe_layers when given, else every
 * interleave_moe_layer_step-th layer counting from step - 1. */
static int is_moe_layer(const json_t *t, int layer)
{
    const json_t *list = json_object_get(t, "moe_layers");
    if (json_is_array(list)) {
        for (size_t i = 0; i < json_array_size(list); i++)
            if (json_integer_value(json_array_get(list, i)) == layer)
                return 1;
        return 0;
    }
    int64_t step = jsonio_int(t, "interleave_moe_layer_step", 1);
    return step > 0 && (layer + 1) % step == 0;
}

/* Chunked-attention layers hold at most attention_chunk_size tokens, as a
 * sliding window does (vLLM's ChunkedLocalAttention spec); NoPE layers are
 * full attention. */
static int llama4_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    const json_t *t = text_of(config);
    int rc = ff_decoder_geometry(t, g, e);
    if (rc)
        return rc;
    const json_t *types = json_object_get(t, "layer_types");
    int64_t chunk = jsonio_int(t, "attention_chunk_size", 0), dense = jsonio_int(t, "intermediate_size_mlp", 0);
    g->experts = (int)jsonio_int(t, "num_local_experts", 0);
    g->top_k = (int)jsonio_int(t, "num_experts_per_tok", 0);
    g->moe_intermediate = jsonio_int(t, "intermediate_size", 0);
    g->has_vision = json_is_object(json_object_get(config, "vision_config"));
    g->tie_embeddings = jsonio_bool(t, "tie_word_embeddings", jsonio_bool(config, "tie_word_embeddings", 0));
    for (int i = 0; i < g->layers; i++) {
        const char *type = json_string_value(json_array_get(types, (size_t)i));
        g->layer[i].full = !type || strcmp(type, "full_attention") == 0 || chunk <= 0;
        g->layer[i].intermediate = is_moe_layer(t, i) ? 0 : dense;
        g->moe_layers += is_moe_layer(t, i);
    }
    g->sliding_window = (int)chunk;
    g->moe = g->moe_layers > 0;
    if (g->moe && (g->experts <= 0 || g->moe_intermediate <= 0))
        return ff_fail(e, FF_EIO, "config.json: text_config lacks num_local_experts or intermediate_size");
    return FF_OK;
}

static int llama4_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int rc = llama4_geometry(config, g, e);
    /* attention everywhere, a dense MLP off the MoE layers, a shared expert on them */
    if (!rc)
        ff_decoder_moe_expect(g, 4ll * g->layers + 3ll * (g->layers - g->moe_layers) + 3ll * g->moe_layers,
                              g->moe ? g->experts : 0, g->moe_layers, x);
    free(g);
    return rc;
}

/* ---- synth: the layout transformers 5.17 saves ------------------------- */

static const ff_synth_preset llama4_presets[] = {
    {"llama4", "Llama-4 with vision (real: Llama-4-Scout-17B-16E, 48 MoE layers x 16 experts)"},
    {NULL, NULL},
};

/* every 4th layer is NoPE full attention, the rest chunked */
static const synth_geom llama4_real = {   /* Llama-4-Scout-17B-16E */
    .moe = 1, .full_every = 4,
    .layers = 48, .hidden = 5120, .intermediate = 16384, .vocab = 202048, .heads = 40, .kv_heads = 8, .head_dim = 128,
    .experts = 16, .top_k = 1, .moe_intermediate = 8192,
    .vision_layers = 34, .vision_hidden = 1408, .vision_intermediate = 5632, .vision_heads = 16,
};
static const synth_geom llama4_tiny = {
    .moe = 1, .full_every = 4,
    .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 2, .head_dim = 64,
    .experts = 4, .top_k = 1, .moe_intermediate = 128,
    .vision_layers = 1, .vision_hidden = 64, .vision_intermediate = 128, .vision_heads = 2,
};

static int llama4_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    (void)preset;
    return ff_decoder_synth_sized(size, &llama4_tiny, &llama4_real, g, e);
}

#define P "language_model.model.layers."
#define VM "vision_model."

static void vision_tensors(const synth_geom *g, synth_list *l)
{
    int64_t h = g->vision_hidden, in = g->vision_intermediate;
    synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "class_embedding");
    synth_add(l, SYNTH_NORMAL, 2, h, 588, 0, VM "patch_embedding.linear.weight");
    synth_add(l, SYNTH_NORMAL, 2, 577, h, 0, VM "positional_embedding_vlm");
    for (int i = 0; i < g->vision_layers; i++) {
        static const char *const proj[] = {"q", "k", "v", "o"};
        for (int p = 0; p < 4; p++) {
            synth_add(l, SYNTH_NORMAL, 2, h, h, 0, VM "model.layers.%d.self_attn.%s_proj.weight", i, proj[p]);
            synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "model.layers.%d.self_attn.%s_proj.bias", i, proj[p]);
        }
        synth_add(l, SYNTH_NORMAL, 2, in, h, 0, VM "model.layers.%d.mlp.fc1.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, in, 0, 0, VM "model.layers.%d.mlp.fc1.bias", i);
        synth_add(l, SYNTH_NORMAL, 2, h, in, 0, VM "model.layers.%d.mlp.fc2.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "model.layers.%d.mlp.fc2.bias", i);
        synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "model.layers.%d.input_layernorm.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "model.layers.%d.input_layernorm.bias", i);
        synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "model.layers.%d.post_attention_layernorm.weight", i);
        synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "model.layers.%d.post_attention_layernorm.bias", i);
    }
    synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "layernorm_pre.weight");
    synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "layernorm_pre.bias");
    synth_add(l, SYNTH_ONES, 1, h, 0, 0, VM "layernorm_post.weight");
    synth_add(l, SYNTH_NORMAL, 1, h, 0, 0, VM "layernorm_post.bias");
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, 4 * h, 0, VM "vision_adapter.mlp.fc1.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, g->hidden, 0, VM "vision_adapter.mlp.fc2.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, g->hidden, 0, "multi_modal_projector.linear_1.weight");
}

static int llama4_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "language_model.lm_head.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "language_model.model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        ff_decoder_synth_attention(l, g, P, i, 0, 0);
        if (i < g->dense_layers) {
            ff_decoder_synth_mlp(l, g, P, i, "feed_forward", g->intermediate);
            continue;
        }
        synth_add(l, SYNTH_NORMAL, 3, g->experts, g->hidden, 2 * g->moe_intermediate, P "%d.feed_forward.experts.gate_up_proj", i);
        synth_add(l, SYNTH_NORMAL, 3, g->experts, g->moe_intermediate, g->hidden, P "%d.feed_forward.experts.down_proj", i);
        synth_add(l, SYNTH_NORMAL, 2, g->experts, g->hidden, 0, P "%d.feed_forward.router.weight", i);
        ff_decoder_synth_mlp(l, g, P, i, "feed_forward.shared_expert", g->moe_intermediate);
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "language_model.model.norm.weight");
    if (g->vision_layers)
        vision_tensors(g, l);
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *llama4_synth_config(const synth_geom *g)
{
    json_t *t = ff_decoder_synth_config(g, "llama4_text", "Llama4ForCausalLM"), *types = json_array(),
           *moe = json_array(), *nope = json_array();
    json_object_del(t, "architectures");
    for (int i = 0; i < g->layers; i++) {
        int full = g->full_every > 0 && (i + 1) % g->full_every == 0;
        json_array_append_new(types, json_string(full ? "full_attention" : "chunked_attention"));
        json_array_append_new(nope, json_integer(full ? 0 : 1));
        if (i >= g->dense_layers)
            json_array_append_new(moe, json_integer(i));
    }
    json_object_set_new(t, "attention_chunk_size", json_integer(8192));
    json_object_set_new(t, "interleave_moe_layer_step", json_integer(1));
    json_object_set_new(t, "intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(t, "intermediate_size_mlp", json_integer(g->intermediate));
    json_object_set_new(t, "layer_types", types);
    json_object_set_new(t, "moe_layers", moe);
    json_object_set_new(t, "no_rope_layers", nope);
    json_object_set_new(t, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(t, "num_local_experts", json_integer(g->experts));
    json_t *c = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string("Llama4ForConditionalGeneration"));
    json_object_set_new(c, "architectures", arch);
    json_object_set_new(c, "model_type", json_string("llama4"));
    json_object_set_new(c, "text_config", t);
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "transformers_version", json_string("5.17.0"));
    if (g->vision_layers) {
        json_t *v = json_object();
        json_object_set_new(v, "hidden_size", json_integer(g->vision_hidden));
        json_object_set_new(v, "intermediate_size", json_integer(g->vision_intermediate));
        json_object_set_new(v, "model_type", json_string("llama4_vision_model"));
        json_object_set_new(v, "num_attention_heads", json_integer(g->vision_heads));
        json_object_set_new(v, "num_hidden_layers", json_integer(g->vision_layers));
        json_object_set_new(v, "patch_size", json_integer(14));
        json_object_set_new(v, "image_size", json_integer(336));
        json_object_set_new(v, "vision_output_dim", json_integer(4 * g->vision_hidden));
        json_object_set_new(v, "projector_input_dim", json_integer(g->hidden));
        json_object_set_new(v, "projector_output_dim", json_integer(g->hidden));
        json_object_set_new(c, "vision_config", v);
    }
    return c;
}

static int llama4_synth_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    int rc = ff_decoder_synth_aux(g, dir, e);
    if (!rc && g->vision_layers)
        rc = synth_write_text(dir, "processor_config.json", "{\n  \"processor_class\": \"Llama4Processor\"\n}\n", e);
    if (!rc && g->vision_layers)
        rc = synth_write_text(dir, "preprocessor_config.json",
                              "{\n  \"image_processor_type\": \"Llama4ImageProcessorFast\",\n  \"patch_size\": 14\n}\n", e);
    if (!rc)
        rc = synth_write_text(dir, "chat_template.jinja",
                              "{% for m in messages %}<|header_start|>{{ m['role'] }}<|header_end|>\n\n{{ m['content'] }}<|eot|>{% endfor %}", e);
    return rc;
}

static const ff_synth_knob llama4_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_FULL_EVERY, FF_KNOB_VOCAB, FF_KNOBS_MOE, FF_KNOBS_VISION,
    FF_KNOBS_END,
};

const ff_family ff_family_llama4 = {
    .name = "llama4",
    .model_types = "llama4, llama4_text",
    .matches = llama4_matches,
    .desc_text = llama4_description,
    .expect = llama4_expect,
    .dense_rule = "q/k/v/o in every layer, gate/up/down in dense layers and shared experts",
    .geometry = llama4_geometry,
    .synth_presets = llama4_presets,
    .synth_knobs = llama4_knobs,
    .synth_preset = llama4_synth_preset,
    .synth_tensors = llama4_synth_tensors,
    .synth_config = llama4_synth_config,
    .synth_aux = llama4_synth_aux,
    .encoder_bytes = ff_encoder_default_bytes,
};

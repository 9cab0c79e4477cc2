/* Gemma-4's synthetic checkpoints: the real tensor names, config schema and
 * geometry (scaled by flags). The embedded default for the demo, the tests
 * and the benchmark; the generic writer (src/families/synth.c) fills them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma4.h"
#include "synth_list.h"

static int gemma4_check_geom(const synth_geom *g, ff_err *e)
{
    if (g->layers <= 0 || g->hidden <= 0 || g->heads <= 0 || g->kv_heads <= 0 || g->head_dim <= 0 ||
        g->intermediate <= 0 || g->vocab <= 0 || g->full_every <= 0)
        return ff_fail(e, FF_EUSAGE, "layers, hidden, heads, kv heads, head dim, intermediate and vocab must be positive");
    if (g->hidden % 16 || g->intermediate % 16 || ((int64_t)g->heads * g->head_dim) % 16 ||
        (g->moe && g->moe_intermediate % 16))
        return ff_fail(e, FF_EUSAGE, "Linear input widths must be multiples of 16");
    if (g->moe && (g->experts <= 0 || g->moe_intermediate <= 0 || g->top_k <= 0))
        return ff_fail(e, FF_EUSAGE, "MoE needs experts, moe intermediate and top-k");
    if (g->vision_layers && (g->vision_heads <= 0 || g->vision_hidden % g->vision_heads))
        return ff_fail(e, FF_EUSAGE, "vision hidden must divide into vision heads");
    return FF_OK;
}

#define VT "model.vision_tower."
#define LM "model.language_model."

static int is_full(const synth_geom *g, int i)
{
    return (i + 1) % g->full_every == 0 || i == g->layers - 1;
}

static void vision_tensors(const synth_geom *g, synth_list *l)
{
    int64_t h = g->vision_hidden, in = g->vision_intermediate, hd = h / g->vision_heads;
    synth_add(l, SYNTH_NORMAL, 3, 2, 10240, h, VT "patch_embedder.position_embedding_table");
    synth_add(l, SYNTH_NORMAL, 2, h, 768, 0, VT "patch_embedder.input_proj.weight");
    for (int i = 0; i < g->vision_layers; i++) {
        static const char *const proj[] = {"q", "k", "v", "o"};
        for (int p = 0; p < 4; p++)
            synth_add(l, SYNTH_NORMAL, 2, h, h, 0, VT "encoder.layers.%d.self_attn.%s_proj.linear.weight", i, proj[p]);
        synth_add(l, SYNTH_ONES, 1, hd, 0, 0, VT "encoder.layers.%d.self_attn.q_norm.weight", i);
        synth_add(l, SYNTH_ONES, 1, hd, 0, 0, VT "encoder.layers.%d.self_attn.k_norm.weight", i);
        synth_add(l, SYNTH_NORMAL, 2, in, h, 0, VT "encoder.layers.%d.mlp.gate_proj.linear.weight", i);
        synth_add(l, SYNTH_NORMAL, 2, in, h, 0, VT "encoder.layers.%d.mlp.up_proj.linear.weight", i);
        synth_add(l, SYNTH_NORMAL, 2, h, in, 0, VT "encoder.layers.%d.mlp.down_proj.linear.weight", i);
        static const char *const norms[] = {"input_layernorm", "post_attention_layernorm",
                                            "pre_feedforward_layernorm", "post_feedforward_layernorm"};
        for (int n = 0; n < 4; n++)
            synth_add(l, SYNTH_ONES, 1, h, 0, 0, VT "encoder.layers.%d.%s.weight", i, norms[n]);
    }
}

static void layer_tensors(const synth_geom *g, synth_list *l, int i)
{
    int full = is_full(g, i), k_is_v = full && g->own[G4_K_IS_V], ple = g->own[G4_PLE];
    int hd = full ? g->own[G4_GLOBAL_HEAD_DIM] : g->head_dim;
    int kvh = k_is_v ? g->own[G4_GLOBAL_KV_HEADS] : g->kv_heads;
    int64_t H = g->hidden;
    synth_add(l, SYNTH_ONES, 1, 1, 0, 0, LM "layers.%d.layer_scalar", i);
    synth_add(l, SYNTH_NORMAL, 2, (int64_t)g->heads * hd, H, 0, LM "layers.%d.self_attn.q_proj.weight", i);
    synth_add(l, SYNTH_ONES, 1, hd, 0, 0, LM "layers.%d.self_attn.q_norm.weight", i);
    synth_add(l, SYNTH_ONES, 1, hd, 0, 0, LM "layers.%d.self_attn.k_norm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, (int64_t)kvh * hd, H, 0, LM "layers.%d.self_attn.k_proj.weight", i);
    if (!k_is_v)
        synth_add(l, SYNTH_NORMAL, 2, (int64_t)kvh * hd, H, 0, LM "layers.%d.self_attn.v_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, H, (int64_t)g->heads * hd, 0, LM "layers.%d.self_attn.o_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, g->intermediate, H, 0, LM "layers.%d.mlp.gate_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, g->intermediate, H, 0, LM "layers.%d.mlp.up_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, H, g->intermediate, 0, LM "layers.%d.mlp.down_proj.weight", i);
    static const char *const norms[] = {"input_layernorm", "post_attention_layernorm",
                                        "pre_feedforward_layernorm", "post_feedforward_layernorm"};
    for (int n = 0; n < 4; n++)
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, LM "layers.%d.%s.weight", i, norms[n]);
    if (ple) {
        synth_add(l, SYNTH_NORMAL, 2, ple, H, 0, LM "layers.%d.per_layer_input_gate.weight", i);
        synth_add(l, SYNTH_NORMAL, 2, H, ple, 0, LM "layers.%d.per_layer_projection.weight", i);
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, LM "layers.%d.post_per_layer_input_norm.weight", i);
    }
    if (g->moe) {
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, LM "layers.%d.router.scale", i);
        synth_add(l, SYNTH_ONES, 1, g->experts, 0, 0, LM "layers.%d.router.per_expert_scale", i);
        synth_add(l, SYNTH_NORMAL, 2, g->experts, H, 0, LM "layers.%d.router.proj.weight", i);
        synth_add(l, SYNTH_NORMAL, 3, g->experts, 2 * g->moe_intermediate, H, LM "layers.%d.experts.gate_up_proj", i);
        synth_add(l, SYNTH_NORMAL, 3, g->experts, H, g->moe_intermediate, LM "layers.%d.experts.down_proj", i);
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, LM "layers.%d.post_feedforward_layernorm_1.weight", i);
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, LM "layers.%d.post_feedforward_layernorm_2.weight", i);
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, LM "layers.%d.pre_feedforward_layernorm_2.weight", i);
    }
}

/* Names and order as transformers 5.17 saves Gemma4ForConditionalGeneration. */
int gemma4_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = gemma4_check_geom(g, e);
    if (rc)
        return rc;
    if (g->vision_layers)
        vision_tensors(g, l);
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, LM "embed_tokens.weight");
    for (int i = 0; i < g->layers; i++)
        layer_tensors(g, l, i);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, LM "norm.weight");
    int ple = g->own[G4_PLE];
    if (ple) {
        synth_add(l, SYNTH_NORMAL, 2, g->vocab, (int64_t)g->layers * ple, 0, LM "embed_tokens_per_layer.weight");
        synth_add(l, SYNTH_NORMAL, 2, (int64_t)g->layers * ple, g->hidden, 0, LM "per_layer_model_projection.weight");
        synth_add(l, SYNTH_ONES, 1, ple, 0, 0, LM "per_layer_projection_norm.weight");
    }
    if (g->vision_layers)
        synth_add(l, SYNTH_NORMAL, 2, g->hidden, g->vision_hidden, 0, "model.embed_vision.embedding_projection.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

int gemma4_synth_preset(const char *arch, const char *size, synth_geom *g, ff_err *e)
{
    memset(g, 0, sizeof *g);
    int moe = strcmp(arch, "gemma4-moe") == 0;
    if (!moe && strcmp(arch, "gemma4-dense") != 0)
        return ff_fail(e, FF_EUSAGE, "unknown --arch %s", arch);
    int real = strcmp(size, "real") == 0;
    if (!real && strcmp(size, "tiny") != 0)
        return ff_fail(e, FF_EUSAGE, "unknown --size %s (tiny|real)", size);
    g->moe = moe;
    g->full_every = 6;
    g->own[G4_K_IS_V] = 1;
    g->sliding_window = 1024;
    g->seed = 1;
    if (real && !moe) {        /* Gemma-4 31B */
        g->layers = 60; g->hidden = 5376; g->intermediate = 21504; g->vocab = 262144;
        g->heads = 32; g->kv_heads = 16; g->head_dim = 256;
        g->own[G4_GLOBAL_HEAD_DIM] = 512; g->own[G4_GLOBAL_KV_HEADS] = 4;
    } else if (real) {         /* Gemma-4 26B-A4B */
        g->layers = 30; g->hidden = 2816; g->intermediate = 2112; g->vocab = 262144;
        g->heads = 16; g->kv_heads = 8; g->head_dim = 256;
        g->own[G4_GLOBAL_HEAD_DIM] = 512; g->own[G4_GLOBAL_KV_HEADS] = 2;
        g->experts = 128; g->top_k = 8; g->moe_intermediate = 704;
    } else {                   /* same shape of model, small enough for a demo */
        g->layers = 12; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 2; g->head_dim = 64;
        g->own[G4_GLOBAL_HEAD_DIM] = 128; g->own[G4_GLOBAL_KV_HEADS] = 1;
        if (moe) { g->experts = 8; g->top_k = 2; g->moe_intermediate = 128; }
    }
    g->vision_layers = real ? 27 : 2;
    g->vision_hidden = real ? 1152 : 64;
    g->vision_intermediate = real ? 4304 : 128;
    g->vision_heads = real ? 16 : 2;
    return FF_OK;
}

static json_t *rope_params(void)
{
    json_t *r = json_object(), *full = json_object(), *sl = json_object();
    json_object_set_new(full, "partial_rotary_factor", json_real(0.25));
    json_object_set_new(full, "rope_theta", json_real(1000000.0));
    json_object_set_new(full, "rope_type", json_string("proportional"));
    json_object_set_new(sl, "rope_theta", json_real(10000.0));
    json_object_set_new(sl, "rope_type", json_string("default"));
    json_object_set_new(r, "full_attention", full);
    json_object_set_new(r, "sliding_attention", sl);
    return r;
}

/* The attention schema: transformers >= 5.15 writes per_layer_config (keys
 * zero-padded layer indices); older releases the flat global fields. */
static void attention_schema(const synth_geom *g, json_t *t)
{
    if (g->own[G4_LEGACY_SCHEMA]) {
        json_object_set_new(t, "global_head_dim", json_integer(g->own[G4_GLOBAL_HEAD_DIM]));
        if (g->own[G4_K_IS_V])
            json_object_set_new(t, "num_global_key_value_heads", json_integer(g->own[G4_GLOBAL_KV_HEADS]));
        return;
    }
    json_t *plc = json_object();
    for (int i = 0; i < g->layers; i++) {
        if (!is_full(g, i))
            continue;
        json_t *e = json_object();
        json_object_set_new(e, "head_dim", json_integer(g->own[G4_GLOBAL_HEAD_DIM]));
        if (g->own[G4_K_IS_V])
            json_object_set_new(e, "num_key_value_heads", json_integer(g->own[G4_GLOBAL_KV_HEADS]));
        char key[16];
        snprintf(key, sizeof key, "%02d", i);
        json_object_set_new(plc, key, e);
    }
    json_object_set_new(t, "per_layer_config", plc);
}

static json_t *text_config(const synth_geom *g)
{
    json_t *t = json_object(), *types = json_array();
    json_object_set_new(t, "attention_bias", json_false());
    json_object_set_new(t, "attention_dropout", json_real(0.0));
    json_object_set_new(t, "attention_k_eq_v", json_boolean(g->own[G4_K_IS_V]));
    json_object_set_new(t, "bos_token_id", json_integer(2));
    json_object_set_new(t, "enable_moe_block", json_boolean(g->moe));
    json_object_set_new(t, "eos_token_id", json_integer(1));
    json_object_set_new(t, "final_logit_softcapping", json_null());
    json_object_set_new(t, "head_dim", json_integer(g->head_dim));
    json_object_set_new(t, "hidden_activation", json_string("gelu_pytorch_tanh"));
    json_object_set_new(t, "hidden_size", json_integer(g->hidden));
    json_object_set_new(t, "hidden_size_per_layer_input", json_integer(g->own[G4_PLE]));
    json_object_set_new(t, "initializer_range", json_real(0.02));
    json_object_set_new(t, "intermediate_size", json_integer(g->intermediate));
    for (int i = 0; i < g->layers; i++)
        json_array_append_new(types, json_string(is_full(g, i) ? "full_attention" : "sliding_attention"));
    json_object_set_new(t, "layer_types", types);
    json_object_set_new(t, "max_position_embeddings", json_integer(262144));
    json_object_set_new(t, "model_type", json_string("gemma4_text"));
    json_object_set_new(t, "moe_intermediate_size", g->moe ? json_integer(g->moe_intermediate) : json_null());
    json_object_set_new(t, "num_attention_heads", json_integer(g->heads));
    json_object_set_new(t, "num_experts", g->moe ? json_integer(g->experts) : json_null());
    json_object_set_new(t, "num_hidden_layers", json_integer(g->layers));
    json_object_set_new(t, "num_key_value_heads", json_integer(g->kv_heads));
    json_object_set_new(t, "num_kv_shared_layers", json_integer(0));
    json_object_set_new(t, "pad_token_id", json_integer(0));
    attention_schema(g, t);
    json_object_set_new(t, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(t, "rope_parameters", rope_params());
    json_object_set_new(t, "sliding_window", json_integer(g->sliding_window));
    json_object_set_new(t, "tie_word_embeddings", json_true());
    json_object_set_new(t, "top_k_experts", g->moe ? json_integer(g->top_k) : json_null());
    json_object_set_new(t, "use_bidirectional_attention", json_null());
    json_object_set_new(t, "use_cache", json_true());
    json_object_set_new(t, "use_double_wide_mlp", json_false());
    json_object_set_new(t, "vocab_size", json_integer(g->vocab));
    json_object_set_new(t, "vocab_size_per_layer_input", json_integer(g->own[G4_PLE] ? g->vocab : 0));
    return t;
}

static json_t *vision_config(const synth_geom *g)
{
    json_t *v = json_object(), *rope = json_object();
    json_object_set_new(v, "attention_bias", json_false());
    json_object_set_new(v, "head_dim", json_integer(g->vision_hidden / g->vision_heads));
    json_object_set_new(v, "hidden_activation", json_string("gelu_pytorch_tanh"));
    json_object_set_new(v, "hidden_size", json_integer(g->vision_hidden));
    json_object_set_new(v, "intermediate_size", json_integer(g->vision_intermediate));
    json_object_set_new(v, "model_type", json_string("gemma4_vision"));
    json_object_set_new(v, "num_attention_heads", json_integer(g->vision_heads));
    json_object_set_new(v, "num_hidden_layers", json_integer(g->vision_layers));
    json_object_set_new(v, "num_key_value_heads", json_integer(g->vision_heads));
    json_object_set_new(v, "patch_size", json_integer(16));
    json_object_set_new(v, "pooling_kernel_size", json_integer(3));
    json_object_set_new(v, "position_embedding_size", json_integer(10240));
    json_object_set_new(v, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(rope, "rope_theta", json_real(100.0));
    json_object_set_new(rope, "rope_type", json_string("axial"));
    json_object_set_new(v, "rope_parameters", rope);
    json_object_set_new(v, "standardize", json_false());
    json_object_set_new(v, "use_clipped_linears", json_false());
    return v;
}

json_t *gemma4_synth_config(const synth_geom *g)
{
    json_t *c = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string("Gemma4ForConditionalGeneration"));
    json_object_set_new(c, "architectures", arch);
    json_object_set_new(c, "audio_config", json_null());
    json_object_set_new(c, "audio_token_id", json_integer(258881));
    json_object_set_new(c, "boa_token_id", json_integer(256000));
    json_object_set_new(c, "boi_token_id", json_integer(255999));
    json_object_set_new(c, "dtype", json_string("bfloat16"));
    json_object_set_new(c, "eoa_token_index", json_integer(258883));
    json_object_set_new(c, "eoi_token_id", json_integer(258882));
    json_object_set_new(c, "image_token_id", json_integer(258880));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "model_type", json_string("gemma4"));
    json_object_set_new(c, "text_config", text_config(g));
    json_object_set_new(c, "tie_word_embeddings", json_true());
    json_object_set_new(c, "transformers_version", json_string("5.17.0"));
    json_object_set_new(c, "video_token_id", json_integer(258884));
    json_object_set_new(c, "vision_config", g->vision_layers ? vision_config(g) : json_null());
    return c;
}

/* Small but real auxiliary files, so the synthetic checkpoint passes the same
 * doctor checks a real multimodal upload must. */
int gemma4_synth_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    static const char *const files[][2] = {
        {"generation_config.json",
         "{\n  \"bos_token_id\": 2,\n  \"eos_token_id\": 1,\n  \"pad_token_id\": 0,\n  \"transformers_version\": \"5.17.0\"\n}\n"},
        {"chat_template.jinja",
         "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
         "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"},
        {"processor_config.json", "{\n  \"processor_class\": \"Gemma4Processor\",\n  \"image_seq_length\": 256\n}\n"},
        {"preprocessor_config.json",
         "{\n  \"image_processor_type\": \"Gemma4ImageProcessor\",\n  \"patch_size\": 16,\n  \"pooling_kernel_size\": 3\n}\n"},
        {"tokenizer_config.json",
         "{\n  \"model_max_length\": 262144,\n  \"padding_side\": \"left\",\n  \"tokenizer_class\": \"GemmaTokenizer\"\n}\n"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (!g->vision_layers && strstr(files[i][0], "processor"))
            continue;
        int rc = synth_write_text(dir, files[i][0], files[i][1], e);
        if (rc)
            return rc;
    }
    return FF_OK;
}

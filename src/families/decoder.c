#include "decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonio.h"

/* A layer is Gated-DeltaNet linear attention when layer_types says so, or,
 * in configs that give only full_attention_interval (transformers derives
 * layer_types from it the same way), when it is not every interval-th. */
static int is_linear_attention(const json_t *config, const char *type, int layer)
{
    if (type)
        return strcmp(type, "linear_attention") == 0;
    int64_t every = jsonio_int(config, "full_attention_interval", 0);
    return every > 0 && (layer + 1) % every != 0;
}

/* vLLM's Gated-DeltaNet state for one sequence (mamba_utils'
 * gated_delta_net_state_shape): the causal conv's last kernel-1 inputs over
 * q, k and v, and the temporal state, v heads x k dim x v dim, both in the
 * model's dtype (bf16), the latter in float32 where the config's
 * mamba_ssm_dtype says so (Qwen3.5). */
static int64_t linear_attention_state(const json_t *config)
{
    int64_t kh = jsonio_int(config, "linear_num_key_heads", 0), vh = jsonio_int(config, "linear_num_value_heads", 0);
    int64_t kd = jsonio_int(config, "linear_key_head_dim", 0), vd = jsonio_int(config, "linear_value_head_dim", 0);
    int64_t kernel = jsonio_int(config, "linear_conv_kernel_dim", 4);
    if (kh <= 0 || vh <= 0 || kd <= 0 || vd <= 0 || kernel <= 0)
        return 0;
    /* Qwen3.5's config asks for a float32 temporal state (mamba_ssm_dtype) */
    const char *ssm = jsonio_str(config, "mamba_ssm_dtype", jsonio_str(config, "mamba_ssm_cache_dtype", "auto"));
    int64_t ssm_bytes = strcmp(ssm, "float32") == 0 ? 4 : 2;
    return (kernel - 1) * (2 * kh * kd + vh * vd) * 2 + vh * kd * vd * ssm_bytes;
}

int ff_decoder_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    memset(g, 0, sizeof *g);
    g->layers = (int)jsonio_int(config, "num_hidden_layers", 0);
    g->hidden = jsonio_int(config, "hidden_size", 0);
    g->vocab = jsonio_int(config, "vocab_size", 0);
    g->heads = (int)jsonio_int(config, "num_attention_heads", 0);
    int kv = (int)jsonio_int(config, "num_key_value_heads", g->heads);
    if (g->layers <= 0 || g->layers > FF_MAX_LAYERS || g->hidden <= 0 || g->heads <= 0 || kv <= 0)
        return ff_fail(e, FF_EIO, "config.json: lacks num_hidden_layers, hidden_size or num_attention_heads");
    int hd = (int)jsonio_int(config, "head_dim", g->hidden / g->heads);
    int64_t inter = jsonio_int(config, "intermediate_size", 0);
    int window = (int)jsonio_int(config, "sliding_window", 0);
    int qwen_window = json_object_get(config, "use_sliding_window") != NULL;
    int use_window = qwen_window ? jsonio_bool(config, "use_sliding_window", 0) : window > 0;
    int from = use_window && qwen_window ? (int)jsonio_int(config, "max_window_layers", 0) : 0;
    g->sliding_window = use_window ? window : 0;
    g->tie_embeddings = jsonio_bool(config, "tie_word_embeddings", 0);
    const json_t *types = json_object_get(config, "layer_types");
    if (types && (!json_is_array(types) || (int)json_array_size(types) != g->layers))
        return ff_fail(e, FF_EIO, "config.json: layer_types has %zu entries for %d layers", json_array_size(types),
                       g->layers);
    int64_t state = linear_attention_state(config);
    for (int i = 0; i < g->layers; i++) {
        const char *type = types ? json_string_value(json_array_get(types, (size_t)i)) : NULL;
        int full = type ? strcmp(type, "sliding_attention") != 0 : !(use_window && window > 0 && i >= from);
        g->layer[i] = (ff_layer){.full = full, .head_dim = hd, .kv_heads = kv, .has_kv = 1, .intermediate = inter};
        if (is_linear_attention(config, type, i)) {
            if (state <= 0)
                return ff_fail(e, FF_EIO, "config.json: layer %d is linear attention but linear_num_key_heads, "
                                          "linear_num_value_heads or their head dims are missing", i);
            g->layer[i].has_kv = 0;
            g->layer[i].state_bytes = state;
        }
    }
    return FF_OK;
}

void ff_decoder_synth_attention(synth_list *l, const synth_geom *g, const char *prefix, int layer, int qk_norm,
                                int bias)
{
    int64_t H = g->hidden, q = (int64_t)g->heads * g->head_dim, kv = (int64_t)g->kv_heads * g->head_dim;
    static const char *const proj[] = {"q", "k", "v", "o"};
    for (int p = 0; p < 4; p++) {
        int64_t rows = p == 0 ? q : p == 3 ? H : kv, cols = p == 3 ? q : H;
        synth_add(l, SYNTH_NORMAL, 2, rows, cols, 0, "%s%d.self_attn.%s_proj.weight", prefix, layer, proj[p]);
        if (bias && p < 3)
            synth_add(l, SYNTH_NORMAL, 1, rows, 0, 0, "%s%d.self_attn.%s_proj.bias", prefix, layer, proj[p]);
    }
    if (qk_norm) {
        synth_add(l, SYNTH_ONES, 1, g->head_dim, 0, 0, "%s%d.self_attn.q_norm.weight", prefix, layer);
        synth_add(l, SYNTH_ONES, 1, g->head_dim, 0, 0, "%s%d.self_attn.k_norm.weight", prefix, layer);
    }
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "%s%d.input_layernorm.weight", prefix, layer);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "%s%d.post_attention_layernorm.weight", prefix, layer);
}

void ff_decoder_synth_mlp(synth_list *l, const synth_geom *g, const char *prefix, int layer, const char *mlp,
                          int64_t inter)
{
    synth_add(l, SYNTH_NORMAL, 2, inter, g->hidden, 0, "%s%d.%s.gate_proj.weight", prefix, layer, mlp);
    synth_add(l, SYNTH_NORMAL, 2, inter, g->hidden, 0, "%s%d.%s.up_proj.weight", prefix, layer, mlp);
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, inter, 0, "%s%d.%s.down_proj.weight", prefix, layer, mlp);
}

json_t *ff_decoder_synth_config(const synth_geom *g, const char *model_type, const char *architecture)
{
    json_t *c = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string(architecture));
    json_object_set_new(c, "architectures", arch);
    json_object_set_new(c, "bos_token_id", json_integer(1));
    json_object_set_new(c, "dtype", json_string("bfloat16"));
    json_object_set_new(c, "eos_token_id", json_integer(2));
    json_object_set_new(c, "head_dim", json_integer(g->head_dim));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(g->hidden));
    json_object_set_new(c, "intermediate_size", json_integer(g->intermediate));
    json_object_set_new(c, "max_position_embeddings", json_integer(32768));
    json_object_set_new(c, "model_type", json_string(model_type));
    json_object_set_new(c, "num_attention_heads", json_integer(g->heads));
    json_object_set_new(c, "num_hidden_layers", json_integer(g->layers));
    json_object_set_new(c, "num_key_value_heads", json_integer(g->kv_heads));
    json_object_set_new(c, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(c, "rope_theta", json_real(1000000.0));
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "transformers_version", json_string("5.17.0"));
    json_object_set_new(c, "vocab_size", json_integer(g->vocab));
    return c;
}

int ff_decoder_synth_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    (void)g;
    int rc = synth_write_text(dir, "generation_config.json",
                              "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"transformers_version\": \"5.17.0\"\n}\n", e);
    if (!rc)
        rc = synth_write_text(dir, "tokenizer_config.json",
                              "{\n  \"model_max_length\": 32768,\n  \"padding_side\": \"left\"\n}\n", e);
    return rc;
}

int ff_decoder_synth_begin(const char *size, int moe, synth_geom *g, int *real, ff_err *e)
{
    *real = strcmp(size, "real") == 0;
    if (!*real && strcmp(size, "tiny") != 0)
        return ff_fail(e, FF_EUSAGE, "unknown --size %s (tiny|real)", size);
    memset(g, 0, sizeof *g);
    g->moe = moe;
    g->seed = 1;
    return FF_OK;
}

int ff_decoder_synth_sized(const char *size, const synth_geom *tiny, const synth_geom *real, synth_geom *g,
                           ff_err *e)
{
    int is_real, rc = ff_decoder_synth_begin(size, 0, g, &is_real, e);
    if (rc)
        return rc;
    *g = is_real ? *real : *tiny;
    g->seed = 1;
    return FF_OK;
}

void ff_decoder_synth_experts(synth_list *l, const synth_geom *g, const char *prefix, int layer, const char *experts,
                              const char *const names[3], int down)
{
    for (int x = 0; x < g->experts; x++)
        for (int p = 0; p < 3; p++) {
            int64_t rows = p == down ? g->hidden : g->moe_intermediate;
            int64_t cols = p == down ? g->moe_intermediate : g->hidden;
            synth_add(l, SYNTH_NORMAL, 2, rows, cols, 0, "%s%d.%s.%d.%s.weight", prefix, layer, experts, x, names[p]);
        }
}

void ff_decoder_moe_expect(const ff_geometry *g, int64_t dense_linears, int64_t experts, int64_t routers,
                           ff_expect *x)
{
    memset(x, 0, sizeof *x);
    x->dense_linears = dense_linears;
    x->moe_layers = g->moe_layers;
    x->experts = experts;
    x->expert_linears = (int64_t)g->moe_layers * experts * 3;
    x->routers = routers;
    x->expert_inter = g->moe_intermediate;
    x->hidden = g->hidden;
}

int ff_decoder_synth_check(const synth_geom *g, ff_err *e)
{
    if (g->layers <= 0 || g->layers > FF_MAX_LAYERS || g->hidden <= 0 || g->heads <= 0 || g->kv_heads <= 0 ||
        g->head_dim <= 0 || g->vocab <= 0 || g->intermediate < 0)
        return ff_fail(e, FF_EUSAGE, "layers (1..%d), hidden, heads, kv heads, head dim and vocab must be positive",
                       FF_MAX_LAYERS);
    if (g->hidden % 16 || g->intermediate % 16 || ((int64_t)g->heads * g->head_dim) % 16 || g->moe_intermediate % 16 ||
        g->shared_intermediate % 16)
        return ff_fail(e, FF_EUSAGE, "Linear input widths must be multiples of 16");
    if (g->moe && (g->experts <= 0 || g->moe_intermediate <= 0 || g->top_k <= 0))
        return ff_fail(e, FF_EUSAGE, "MoE needs experts, moe intermediate and top-k");
    if (g->dense_layers < 0 || g->dense_layers > g->layers)
        return ff_fail(e, FF_EUSAGE, "dense layers must be between 0 and the layer count");
    return FF_OK;
}

static const ff_rule mtp_linear = FF_KEEP_LINEAR("", "mtp", GUARD_FIXED);
static const ff_rule mtp_other = FF_KEEP("", "mtp", GUARD_FIXED);

const ff_rule *ff_decoder_mtp_rule(const json_t *config, const char *name)
{
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0)
        return NULL;
    char *end;
    long layer = strtol(name + sizeof prefix - 1, &end, 10);
    if (*end != '.' || layer < jsonio_int(config, "num_hidden_layers", 0))
        return NULL;
    size_t n = strlen(name);
    int weight = n > 7 && strcmp(name + n - 7, ".weight") == 0 && !strstr(name, "norm.") &&
                 !strstr(name, "embed_tokens") && !strstr(name, "layernorm");
    return weight ? &mtp_linear : &mtp_other;
}

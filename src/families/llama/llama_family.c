/* Llama-style dense causal LMs: LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (q_norm/k_norm).
 * One layout: model.embed_tokens, model.layers.N.{self_attn,mlp}.*_proj,
 * input/post_attention_layernorm, model.norm, lm_head (absent when tied).
 * A quantized Linear's bias stays "<mod>.bias" in its dtype, as
 * compressed-tensors saves it; vLLM's loaders read it there. */
#include <string.h>

#include "family.h"
#include "jsonio.h"

#define LM "^model\\.layers\\.[0-9]+\\."

static const ff_rule llama_rules[] = {
    FF_DENSE_ATTENTION_ROWS(LM),
    FF_DENSE_MLP_ROWS(LM, "mlp"),
    FF_KEEP(LM "(self_attn|mlp)\\.[a-z_]+_proj\\.bias$", "bias", GUARD_NONE),
    /* older checkpoints carry the rotary buffer; transformers ignores it */
    FF_KEEP(LM "self_attn\\.rotary_emb\\.inv_freq$", "rotary", GUARD_FIXED),
    FF_KEEP("^model\\.embed_tokens\\.weight$", "embedding", GUARD_FIXED),
    /* input_layernorm, post_attention_layernorm, q_norm, k_norm, model.norm */
    FF_KEEP("(norm|layernorm)\\.weight$", "norm", GUARD_FIXED),
    FF_KEEP_LINEAR("^lm_head\\.weight$", "lm_head", GUARD_FIXED),
};

static const char *const llama_model_types[] = {"llama", "qwen2", "qwen3", "mistral", NULL};

static int llama_matches(const json_t *config)
{
    const char *mt = jsonio_str(config, "model_type", "");
    for (size_t i = 0; llama_model_types[i]; i++)
        if (strcmp(mt, llama_model_types[i]) == 0)
            return 1;
    return 0;
}

static int llama_layers(const json_t *config) { return (int)jsonio_int(config, "num_hidden_layers", 0); }

static int llama_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    int layers = llama_layers(config);
    int64_t hidden = jsonio_int(config, "hidden_size", 0);
    if (layers <= 0 || hidden <= 0)
        return ff_fail(e, FF_EIO, "config.json: lacks num_hidden_layers or hidden_size");
    memset(x, 0, sizeof *x);
    x->dense_linears = (int64_t)layers * 7; /* q, k, v, o, gate, up, down */
    x->hidden = hidden;
    return FF_OK;
}

/* Every layer attends fully unless the config turns on a sliding window
 * (Mistral's sliding_window; Qwen2/3's use_sliding_window from
 * max_window_layers on), as vLLM's per-layer KV spec does. head_dim defaults
 * to hidden / heads, as transformers' LlamaConfig does. */
static int llama_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    memset(g, 0, sizeof *g);
    g->layers = llama_layers(config);
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
    for (int i = 0; i < g->layers; i++) {
        const char *type = types ? json_string_value(json_array_get(types, (size_t)i)) : NULL;
        int full = type ? strcmp(type, "sliding_attention") != 0 : !(use_window && window > 0 && i >= from);
        g->layer[i] = (ff_layer){.full = full, .head_dim = hd, .kv_heads = kv, .has_kv = 1, .intermediate = inter};
    }
    return FF_OK;
}

static const char *const llama_implicit_ignore[] = {"lm_head", NULL};

const ff_family ff_family_llama = {
    .name = "llama",
    .model_types = "llama, mistral, qwen2, qwen3",
    .matches = llama_matches,
    .rules = llama_rules,
    .nrules = sizeof llama_rules / sizeof *llama_rules,
    .expect = llama_expect,
    .dense_rule = "q/k/v/o plus gate/up/down in every layer",
    .geometry = llama_geometry,
    .implicit_ignore = llama_implicit_ignore,
};

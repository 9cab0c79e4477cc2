/* Llama-style dense causal LMs: LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (q_norm/k_norm).
 * One layout: model.embed_tokens, model.layers.N.{self_attn,mlp}.*_proj,
 * input/post_attention_layernorm, model.norm, lm_head (absent when tied).
 * A quantized Linear's bias stays "<mod>.bias" in its dtype, as
 * compressed-tensors saves it; vLLM's loaders read it there. */
#include "arch.h"
#include <string.h>

#include "jsonio.h"

#define LM "^model\\.layers\\.[0-9]+\\."

static const arch_rule llama_rules[] = {
    /* vLLM fuses q/k/v (QKVParallelLinear) and gate/up (MergedColumnParallelLinear)
     * into one GEMM with one global scale, so they are tied. */
    {LM "self_attn\\.(q|k|v)_proj\\.weight$", ROLE_LINEAR, "attention", 1, "qkv", GUARD_NONE, 0, {0}},
    {LM "self_attn\\.o_proj\\.weight$", ROLE_LINEAR, "attention", 1, NULL, GUARD_NONE, 0, {0}},
    {LM "mlp\\.(gate|up)_proj\\.weight$", ROLE_LINEAR, "mlp", 1, "gate_up", GUARD_NONE, 0, {0}},
    {LM "mlp\\.down_proj\\.weight$", ROLE_LINEAR, "mlp", 1, NULL, GUARD_NONE, 0, {0}},
    {LM "(self_attn|mlp)\\.[a-z_]+_proj\\.bias$", ROLE_KEEP, "bias", 0, NULL, GUARD_NONE, 0, {0}},
    /* older checkpoints carry the rotary buffer; transformers ignores it */
    {LM "self_attn\\.rotary_emb\\.inv_freq$", ROLE_KEEP, "rotary", 0, NULL, GUARD_FIXED, 0, {0}},
    {"^model\\.embed_tokens\\.weight$", ROLE_KEEP, "embedding", 0, NULL, GUARD_FIXED, 0, {0}},
    /* input_layernorm, post_attention_layernorm, q_norm, k_norm, model.norm */
    {"(norm|layernorm)\\.weight$", ROLE_KEEP, "norm", 0, NULL, GUARD_FIXED, 0, {0}},
    {"^lm_head\\.weight$", ROLE_KEEP, "lm_head", 1, NULL, GUARD_FIXED, 0, {0}},
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

static int llama_expect(const json_t *config, arch_expect *x, ff_err *e)
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

static void llama_describe(const json_t *config, arch_shape *s)
{
    memset(s, 0, sizeof *s);
    s->layers = llama_layers(config);
    s->tie_embeddings = jsonio_bool(config, "tie_word_embeddings", 0);
}

const arch_family arch_llama = {
    .name = "llama",
    .matches = llama_matches,
    .rules = llama_rules,
    .nrules = sizeof llama_rules / sizeof *llama_rules,
    .expect = llama_expect,
    .describe = llama_describe,
};

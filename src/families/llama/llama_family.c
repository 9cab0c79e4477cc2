/* Llama-style dense causal LMs: LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (q_norm/k_norm).
 * One layout: model.embed_tokens, model.layers.N.{self_attn,mlp}.*_proj,
 * input/post_attention_layernorm, model.norm, lm_head (absent when tied).
 * A quantized Linear's bias stays "<mod>.bias" in its dtype, as
 * compressed-tensors saves it; vLLM's loaders read it there. */
#include <string.h>

#include "decoder.h"
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

static const char *const llama_implicit_ignore[] = {"lm_head", NULL};

const ff_family ff_family_llama = {
    .name = "llama",
    .model_types = "llama, mistral, qwen2, qwen3",
    .matches = llama_matches,
    .rules = llama_rules,
    .nrules = sizeof llama_rules / sizeof *llama_rules,
    .expect = llama_expect,
    .dense_rule = "q/k/v/o plus gate/up/down in every layer",
    .geometry = ff_decoder_geometry,
    .implicit_ignore = llama_implicit_ignore,
};

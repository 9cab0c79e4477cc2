/* Llama-style dense causal LMs: LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (q_norm/k_norm).
 * One layout: model.embed_tokens, model.layers.N.{self_attn,mlp}.*_proj,
 * input/post_attention_layernorm, model.norm, lm_head (absent when tied).
 * A quantized Linear's bias stays "<mod>.bias" in its dtype, as
 * compressed-tensors saves it; vLLM's loaders read it there. */
#include "family.h"

/* The family as data (docs/family-files.md): the same text a user writes
 * for --family-file; "[.]" is a literal dot without a backslash to escape. */
static const char llama_description[] =
    "format 1\n"
    "family llama\n"
    "model-type llama qwen2 qwen3 mistral\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    /* vLLM fuses q/k/v (QKVParallelLinear) and gate/up (MergedColumnParallelLinear)
     * into one GEMM with one global scale, so each is tied */
    "quant $(L)self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant $(L)self_attn[.]o_proj[.]weight$ group=attention\n"
    "quant $(L)mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n"
    "quant $(L)mlp[.]down_proj[.]weight$ group=mlp\n"
    "keep $(L)(self_attn|mlp)[.][a-z_]+_proj[.]bias$ group=bias\n"
    /* older checkpoints carry the rotary buffer; transformers ignores it */
    "keep $(L)self_attn[.]rotary_emb[.]inv_freq$ group=rotary guard=fixed\n"
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    /* input_layernorm, post_attention_layernorm, q_norm, k_norm, model.norm */
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "dense-per-layer 7\n"
    "implicit-ignore lm_head\n";

const ff_family ff_family_llama = {
    .name = "llama",
    .model_types = "llama, mistral, qwen2, qwen3",
    .desc_text = llama_description,
};

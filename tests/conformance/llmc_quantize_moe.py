"""llm-compressor 0.14's NVFP4A16 data-free oneshot of a tiny MoE checkpoint (the peer),
with the ignore list of llm-compressor's own example for that family.
usage: llmc_quantize_moe.py FAMILY SRC DST
oneshot linearizes transformers' fused experts itself (its modeling/ MoE
replacements), so the saved names are per expert."""
import sys, os, time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch, transformers
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier

fam, src, dst = sys.argv[1:4]
IGNORE = {  # llm-compressor's examples: routers (and shared-expert gates) stay bf16
    "qwen3_moe": ["lm_head", "re:.*mlp.gate$"],
    "qwen2_moe": ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"],
    "mixtral": ["lm_head", "re:.*block_sparse_moe.gate"],
    "glm4_moe": ["lm_head", "re:.*mlp.gate$"],
    "llama4": ["re:.*lm_head", "re:.*router", "re:vision_model.*", "re:multi_modal_projector.*"],
    "llama4_text": ["re:.*lm_head", "re:.*router"],
    # examples/quantization_w4a16_fp4/qwen3_5 (Qwen3.5-122B-A10B, Qwen3.6-35B-A3B): "no need to ignore mtp"
    "qwen3_5_moe": ["re:.*lm_head", "re:visual.*", "re:model.visual.*", "re:.*mlp.gate$", "re:.*embed_tokens$",
                    "re:.*shared_expert_gate$", "re:.*linear_attn.*"],
    "qwen3_5": ["lm_head", "re:.*visual.*", "re:.*linear_attn.*"],   # its Qwen3.5-27B example
    "qwen3_next": ["lm_head", "re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$", "re:.*linear_attn.*"],
    "minimax_m2": ["lm_head", "re:.*block_sparse_moe.gate$"],
    "glm4_moe_lite": ["lm_head", "re:.*mlp.gate$"],
    # DeepSeek sparse attention: vLLM builds the indexer's fused wk + weights_proj with
    # quant_config=None (deepseek_v2.py, class Indexer), so both stay bf16; its GLM-5.2
    # example ignores weights_proj and the routers (re:.*mlp\.gate.* also takes the bias)
    "deepseek_v32": ["lm_head", "re:.*mlp.gate$", "re:.*indexer.wk$", "re:.*indexer.weights_proj$"],
    "glm_moe_dsa": ["lm_head", "re:.*mlp.gate$", "re:.*indexer.wk$", "re:.*indexer.weights_proj$"],
    # no llm-compressor example for these two (none in 0.14, none in its repository's
    # examples/ either): lm_head and the routers. ERNIE-4.5's router is a bare parameter of
    # Ernie4_5_MoeTopKRouter (no Linear to skip; the pattern keeps it skipped should that change);
    # Hunyuan's is an fp32 nn.Linear, mlp.gate.wg. Neither has a shared-expert gate.
    "ernie4_5_moe": ["lm_head", "re:.*mlp.gate$"],
    "hunyuan_v1_moe": ["lm_head", "re:.*mlp.gate.wg$"],
}[fam]
VISION = ("llama4", "qwen3_5_moe")
cls = transformers.AutoModelForImageTextToText if fam in VISION else transformers.AutoModelForCausalLM
t0 = time.time()
m = cls.from_pretrained(src, dtype=torch.bfloat16)
if fam == "llama4_text":
    # llm-compressor 0.14's Llama-4 expert linearization (modeling/moe/llama4.py:29) reads
    # config.text_config, which only the image-text model's config has: the text-only
    # Llama4ForCausalLM raises AttributeError there. Its text config is that config itself.
    m.config.text_config = m.config
oneshot(model=m, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=IGNORE))
m.save_pretrained(dst, save_compressed=True)
print(f"llmc_quantize_moe: {fam} -> {dst} in {time.time()-t0:.1f} s")

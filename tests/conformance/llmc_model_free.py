"""llm-compressor 0.14's model_free_ptq (its data-free path, no model definition) with
NVFP4A16 on a Qwen3-MoE folder, routers ignored as its MoE examples do (and the
embeddings, which it would otherwise quantize and vLLM then refuses to load).
usage: llmc_model_free.py SRC OUT
Its microscale fusion pairs `mlp.gate_proj`/`mlp.up_proj` and `w1`/`w3` only
(entrypoints/model_free/microscale.py), so per-expert `mlp.experts.N.gate_proj` /
`up_proj` get a global scale each: t_vllm.sh shows what vLLM says on loading it."""
import os, sys
from llmcompressor import model_free_ptq

src, out = os.path.abspath(sys.argv[1]), sys.argv[2]
model_free_ptq(src, out, scheme="NVFP4A16", ignore=["lm_head", "re:.*mlp.gate$", "re:.*embed_tokens.*"])
print(f"llmc_model_free: {src} -> {out}")

"""llm-compressor's NVFP4A16 data-free oneshot of a bf16 Gemma-4 checkpoint (the peer).
usage: llmc_quantize.py SRC DST
Same recipe as llm-compressor's gemma4 NVFP4A16 example plus router and per_layer
ignores (which fp4forge also keeps bf16). For MoE, oneshot linearizes the fused experts
(llmcompressor.modeling.moe.linearize_moe) itself, so the saved names are per expert."""
import sys, os, time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch
from transformers import AutoModelForImageTextToText
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier

src, dst = sys.argv[1], sys.argv[2]
t0 = time.time()
m = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.bfloat16)
ign = ["lm_head", "re:.*vision_tower.*", "re:.*audio_tower.*", "re:.*embed_vision.*",
       "re:.*embed_audio.*", "re:.*router.*", "re:.*per_layer.*"]
oneshot(model=m, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=ign))
m.save_pretrained(dst, save_compressed=True)
print(f"llmc_quantize: wrote {dst} in {time.time()-t0:.1f} s")

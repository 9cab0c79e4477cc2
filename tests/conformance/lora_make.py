"""Makes a random PEFT LoRA for a tiny Gemma-4 with the peft package, and
peft's own merge_and_unload() of it (the reference fp4forge merge must equal).

usage: lora_make.py BASE ADAPTER_OUT PEFT_MERGED_OUT [--variant NAME]
variants: plain (default; r 8, alpha 16, rank/alpha_pattern on o_proj),
          rslora, inert (lora_B left at PEFT's zero init), vision (also targets
          the vision tower), dora (use_dora) -- the last three only write the adapter.
"""
import argparse

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForImageTextToText

ap = argparse.ArgumentParser()
ap.add_argument("base")
ap.add_argument("adapter")
ap.add_argument("merged")
ap.add_argument("--variant", default="plain")
a = ap.parse_args()

torch.manual_seed(1)
model = AutoModelForImageTextToText.from_pretrained(a.base, dtype=torch.bfloat16)
text = r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
kw = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=text,
          rank_pattern={"o_proj": 4}, alpha_pattern={"o_proj": 32})
if a.variant == "rslora":
    kw.update(use_rslora=True)
if a.variant == "vision":
    kw.update(target_modules=text + r"|model\.vision_tower\..*self_attn\.q_proj\.linear")
if a.variant == "dora":
    kw.update(use_dora=True)
model = get_peft_model(model, LoraConfig(**kw))
if a.variant != "inert":
    # A trained adapter has non-zero B; random values big enough to move bf16.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
model.save_pretrained(a.adapter)
if a.variant in ("plain", "rslora"):
    merged = model.merge_and_unload()
    merged.save_pretrained(a.merged)

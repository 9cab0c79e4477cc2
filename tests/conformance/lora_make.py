"""Makes random PEFT LoRAs for a tiny Gemma-4 with the peft package, and
peft's own merge_and_unload() of them (the reference fp4forge's merge must equal).

usage: lora_make.py BASE OUTROOT VARIANT...
writes OUTROOT/adapter-VARIANT (and OUTROOT/peft-VARIANT for plain, rslora).
variants: plain (r 8, alpha 16, rank_pattern/alpha_pattern on o_proj), rslora,
          inert (lora_B left at PEFT's zero init), vision (also the vision
          tower's q_proj), dora (use_dora).
"""
import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForImageTextToText

base, root, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
TEXT = r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"

for v in variants:
    torch.manual_seed(1)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.bfloat16)
    kw = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TEXT,
              rank_pattern={"o_proj": 4}, alpha_pattern={"o_proj": 32})
    if v == "rslora":
        kw.update(use_rslora=True, r=16)
    if v == "vision":
        kw.update(target_modules=TEXT + r"|model\.vision_tower\..*self_attn\.q_proj\.linear")
    if v == "dora":
        kw.update(use_dora=True)
    model = get_peft_model(model, LoraConfig(**kw))
    if v != "inert":
        # A trained adapter has non-zero B; random values big enough to move bf16.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_A" in name or "lora_B" in name:
                    p.copy_(torch.randn_like(p) * 0.05)
    model.save_pretrained(f"{root}/adapter-{v}")
    if v in ("plain", "rslora"):
        model.merge_and_unload().save_pretrained(f"{root}/peft-{v}")

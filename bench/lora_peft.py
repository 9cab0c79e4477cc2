"""bench/lora.sh's peer side: peft, as users run it.

  lora_peft.py make BASE ADAPTER    a rank-16 LoRA on every text attention and MLP
                                    Linear, random non-zero A and B (seeded), saved by peft
  lora_peft.py merge BASE ADAPTER OUT
                                    what a user runs before quantizing: load the bf16
                                    base, PeftModel.from_pretrained, merge_and_unload,
                                    save_pretrained (timed whole by the caller)
"""
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForImageTextToText

TEXT = r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"


def load(base):
    return AutoModelForImageTextToText.from_pretrained(base, dtype=torch.bfloat16)


def make(base, adapter):
    torch.manual_seed(1)
    model = get_peft_model(load(base), LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TEXT))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.02)
    model.save_pretrained(adapter)


def merge(base, adapter, out):
    model = PeftModel.from_pretrained(load(base), adapter)
    model.merge_and_unload().save_pretrained(out)


if __name__ == "__main__":
    {"make": make, "merge": merge}[sys.argv[1]](*sys.argv[2:])

"""Info only (no verdict): what plain transformers does with a per-expert quantized
Gemma-4 MoE checkpoint (no llm-compressor linearization). Prints the load report counts.
usage: hf_direct_probe.py Q_DIR"""
import sys, os, torch
from transformers import AutoModelForImageTextToText
m, info = AutoModelForImageTextToText.from_pretrained(sys.argv[1], dtype=torch.bfloat16, output_loading_info=True)
mk, uk = info.get("missing_keys", []), info.get("unexpected_keys", [])
print(f"  info: plain transformers load of the per-expert checkpoint: missing_keys={len(mk)} "
      f"(e.g. {sorted(mk)[:1]}), unexpected_keys={len(uk)} (e.g. {sorted(uk)[:1]}); the fused "
      f"experts stay randomly initialised, so MoE checks load through llm-compressor's linearized definition")

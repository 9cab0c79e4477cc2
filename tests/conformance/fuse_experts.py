"""The fused 3-D layout some uploads store (the published Qwen3.5 / 3.6 bf16 checkpoints):
each MoE layer's per-expert mlp.experts.E.{gate,up,down}_proj.weight stacked into
mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up rows) and mlp.experts.down_proj
[E, H, I], as transformers 5.17 holds them in memory (its conversion mapping's
MergeModulelist + Concatenate), everything else copied.
usage: fuse_experts.py SRC DST"""
import glob, os, re, shutil, sys
import torch
from safetensors.torch import load_file, save_file

src, dst = sys.argv[1:3]
sd = {}
for f in sorted(glob.glob(src + "/*.safetensors")):
    sd.update(load_file(f))
pat = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")
groups, out = {}, {}
for k, t in sd.items():
    m = pat.match(k)
    if m:
        groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = t
    else:
        out[k] = t
for parent, g in groups.items():
    n = 1 + max(e for e, _ in g)
    out[parent + ".gate_up_proj"] = torch.stack([torch.cat([g[(e, "gate")], g[(e, "up")]]) for e in range(n)])
    out[parent + ".down_proj"] = torch.stack([g[(e, "down")] for e in range(n)])
os.makedirs(dst, exist_ok=True)
save_file(out, dst + "/model.safetensors", metadata={"format": "pt"})
for f in os.listdir(src):
    if not f.endswith(".safetensors") and not f.endswith(".index.json") and os.path.isfile(os.path.join(src, f)):
        shutil.copy(os.path.join(src, f), dst)
print(f"fuse_experts: {len(groups)} MoE layers fused, {len(out)} tensors")

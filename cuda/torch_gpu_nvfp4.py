#!/usr/bin/env python3
"""The same NVFP4 math in torch on the GPU, as the baseline for the CUDA path:
global scale bf16(bf16(1/amax) * 2688) shared by q/k/v and gate/up, group scale
bf16(amax/6) * gs -> clamp 448 -> e4m3 (0 -> 0.125), y = x / (s8 / gs), E2M1
buckets, sign iff y < 0. Times the quantization of every module fp4forge
quantized in --ref (weights already on the GPU, and with the host->device copy),
and compares the bytes with fp4forge's. Prints one JSON line."""
import argparse, json, os, re, time
import torch
from safetensors import safe_open

THRESH = [(0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False)]


def fused_key(m):
    for pat, tag in ((r"(.*\.self_attn)\.[qkv]_proj$", "qkv"), (r"(.*\.mlp)\.(gate|up)_proj$", "gate_up")):
        g = re.match(pat, m)
        if g:
            return g.group(1) + "." + tag
    return m


def files(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        return json.load(open(idx))["weight_map"]
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        return {k: "model.safetensors" for k in f.keys()}


def quantize(w, gs):
    rows, cols = w.shape
    x = w.reshape(rows, cols // 16, 16)
    s = (x.abs().amax(-1) / 6).float() * gs
    s8f = s.clamp(max=448.0).to(torch.float8_e4m3fn).float()
    s8f = torch.where(s8f == 0, torch.full_like(s8f, 0.125), s8f)
    y = x.float() / (s8f / gs).unsqueeze(-1)
    a = y.abs()
    code = torch.gt(a, 0.25).to(torch.uint8)
    for t, closed in THRESH:
        code += (a >= t) if closed else (a > t)
    code |= (y < 0).to(torch.uint8) << 3
    code = code.reshape(rows, cols)
    return code[:, 0::2] | (code[:, 1::2] << 4), s8f.to(torch.float8_e4m3fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="src", required=True)
    ap.add_argument("--ref", required=True)
    a = ap.parse_args()
    dev = torch.device("cuda")
    ref = files(a.ref)
    src = files(a.src)
    mods = sorted(k[:-len(".weight_packed")] for k in ref if k.endswith(".weight_packed"))
    groups = {}
    for m in mods:
        groups.setdefault(fused_key(m), []).append(m)
    host = {}
    for m in mods:
        with safe_open(os.path.join(a.src, src[m + ".weight"]), "pt") as f:
            host[m] = f.get_tensor(m + ".weight").pin_memory()
    nbytes = sum(t.numel() * 2 for t in host.values())

    def run(copy):
        out = {}
        dev_w = {m: host[m].to(dev) for m in mods} if not copy else None
        torch.cuda.synchronize()
        t0 = time.monotonic()
        for key, ms in groups.items():
            ws = [host[m].to(dev, non_blocking=True) if copy else dev_w[m] for m in ms]
            amax = torch.stack([w.abs().max() for w in ws]).max()
            gs = (2688.0 / torch.clamp(amax, min=torch.finfo(torch.bfloat16).tiny)).float()
            gs = torch.where(torch.isfinite(gs), gs, torch.ones_like(gs))
            for m, w in zip(ms, ws):
                out[m] = quantize(w, gs)
        torch.cuda.synchronize()
        return time.monotonic() - t0, out

    run(False)  # warm-up (kernel compilation, allocator)
    t_dev, out = run(False)
    t_copy, _ = run(True)
    equal = 0
    for m in mods:
        with safe_open(os.path.join(a.ref, ref[m + ".weight_packed"]), "pt") as f:
            p = f.get_tensor(m + ".weight_packed").view(torch.uint8)
            s = f.get_tensor(m + ".weight_scale").view(torch.uint8)
        equal += int(torch.equal(out[m][0].cpu(), p) and torch.equal(out[m][1].view(torch.uint8).cpu(), s))
    print(json.dumps({"torch_gpu_s": round(t_dev, 4), "torch_gpu_GBps": round(nbytes / 1e9 / t_dev, 1),
                      "torch_gpu_with_copy_s": round(t_copy, 4), "torch_gpu_with_copy_GBps": round(nbytes / 1e9 / t_copy, 2),
                      "bf16_bytes": nbytes, "modules": len(mods), "modules_equal_to_fp4forge": equal}))


if __name__ == "__main__":
    main()

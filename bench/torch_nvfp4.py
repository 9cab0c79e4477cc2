#!/usr/bin/env python3
"""NVFP4 (compressed-tensors nvfp4-pack-quantized) in plain torch ops on the CPU,
vectorised, as the baseline for bench/run. Same math as fp4forge and
llm-compressor: global scale 2688/amax in bf16 shared by q/k/v and by gate/up,
per-16 scale round_bf16(amax/6) * gs -> clamp 448 -> e4m3 (0 -> 0.125),
eff = s8 / gs, y = x / eff, E2M1 buckets, sign iff y < 0.

Which tensors: the ones fp4forge quantized (every `<module>.weight_packed` in
--ref), read from --in with safetensors. Timed: reading + quantizing; the
output is kept only long enough to compare (untimed) with fp4forge's bytes on
--check tensors, so torch is not charged for writing.

Prints one JSON line: seconds, bytes (bf16 bytes quantized), tensors, checked,
equal.
"""
import argparse
import json
import os
import re
import time

import torch
from safetensors import safe_open

ROWS = 1024  # rows per chunk: bounds the f32 temporaries to ~400 MB


def fused_key(module):
    """q/k/v share a global scale, gate/up share one (as llm-compressor fuses)."""
    m = re.match(r"(.*\.self_attn)\.[qkv]_proj$", module)
    if m:
        return m.group(1) + ".qkv"
    m = re.match(r"(.*\.mlp)\.(gate|up)_proj$", module)
    if m:
        return m.group(1) + ".gate_up"
    return module


def global_scale(amax_bf16):
    # torch's __rtruediv__ on a bf16 tensor: reciprocal then * 2688, in bf16
    a = torch.clamp(amax_bf16, min=torch.finfo(torch.bfloat16).tiny)
    gs = (2688.0 / a).float()
    return torch.where(torch.isfinite(gs), gs, torch.ones_like(gs))


# E2M1 bucket edges of |y|: CT's cast_to_fp4 is closed at the even codes
# (0.25, 1.25, 2.5, 5.0 go down) and open at the odd ones (0.75, 1.75, 3.5 go
# up). Seven compares summed beat torch.bucketize 2.5x on this CPU.
THRESH = [(0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False)]
ZERO_SCALE = torch.tensor(0.125)


def quantize(w, gs):
    rows, cols = w.shape
    packed = torch.empty(rows, cols // 2, dtype=torch.uint8)
    scales = torch.empty(rows, cols // 16, dtype=torch.float8_e4m3fn)
    for r0 in range(0, rows, ROWS):
        x = w[r0:r0 + ROWS].reshape(-1, cols // 16, 16)
        s = (x.abs().amax(-1) / 6).float() * gs  # bf16 division, then f32
        s8f = s.clamp(max=448.0).to(torch.float8_e4m3fn).float()
        s8f = torch.where(s8f == 0, ZERO_SCALE, s8f)
        y = x.float() / (s8f / gs).unsqueeze(-1)
        a = y.abs()
        code = torch.gt(a, 0.25).to(torch.uint8)
        for t, closed_below in THRESH:
            code += (a >= t) if closed_below else (a > t)
        code |= (y < 0).to(torch.uint8) << 3
        code = code.reshape(x.shape[0], cols)
        packed[r0:r0 + ROWS] = code[:, 0::2] | (code[:, 1::2] << 4)
        scales[r0:r0 + ROWS] = s8f.reshape(x.shape[0], -1).to(torch.float8_e4m3fn)
    return packed, scales


def tensor_files(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            return json.load(f)["weight_map"]
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        return {k: "model.safetensors" for k in f.keys()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="src", required=True)
    ap.add_argument("--ref", required=True, help="fp4forge output (which tensors, and the check)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--check", type=int, default=7, help="tensors to compare byte for byte")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ref_map = tensor_files(a.ref)
    modules = sorted(k[: -len(".weight_packed")] for k in ref_map if k.endswith(".weight_packed"))
    src_map = tensor_files(a.src)
    groups = {}
    for m in modules:
        groups.setdefault(fused_key(m), []).append(m)

    t0 = time.monotonic()
    handles = {}

    def load(name):
        fn = src_map[name]
        if fn not in handles:
            handles[fn] = safe_open(os.path.join(a.src, fn), "pt")
        return handles[fn].get_tensor(name)

    nbytes = ntensors = checked = equal = 0
    check_time = 0.0
    for key in sorted(groups):
        ws = [load(m + ".weight") for m in groups[key]]
        amax = torch.stack([w.abs().max() for w in ws]).max()
        gs = global_scale(amax)
        for m, w in zip(groups[key], ws):
            packed, scales = quantize(w, gs)
            nbytes += w.numel() * w.element_size()
            ntensors += 1
            if checked < a.check:
                c0 = time.monotonic()
                with safe_open(os.path.join(a.ref, ref_map[m + ".weight_packed"]), "pt") as f:
                    ok = torch.equal(f.get_tensor(m + ".weight_packed").view(torch.uint8), packed) and \
                        torch.equal(f.get_tensor(m + ".weight_scale").view(torch.uint8), scales.view(torch.uint8))
                checked += 1
                equal += int(ok)
                check_time += time.monotonic() - c0
        del ws
    seconds = time.monotonic() - t0 - check_time
    print(json.dumps({"seconds": round(seconds, 3), "bytes": nbytes, "tensors": ntensors,
                      "checked": checked, "equal": equal, "threads": a.threads}))


if __name__ == "__main__":
    main()

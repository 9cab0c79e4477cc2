#!/usr/bin/env python3
"""Issue 40, item 2: which data-free statistic of a dense unit's weights predicts the KL its
NVFP4A16 quantization costs, measured unit by unit on the real model (bench/sensitivity_kl.py's
JSON). For each unit (q/k/v, o, gate/up, down of every layer) it computes, from the bf16
weights alone: the NVFP4 squared error (a plain-torch fake quantization: per-16 E4M3 scales
under the unit's global scale, nearest E2M1), that error relative to the unit's energy (what
`plan --budget` scores by today), the kurtosis E[w^4]/E[w^2]^2, the peak max|w|/rms, and
products of them. It prints each one's Spearman rank correlation with the measured KL, per
unit and per byte (the order the budget's greedy buys in), on even and odd layers apart and
on the 512-token measurement too, and replays the greedy on the measured per-unit KLs
(assumed additive) at +5/15/30/40% bytes with each score and with the measurements themselves.
usage: sensitivity_proxies.py BF16_DIR KL_JSON_2048 [KL_JSON_512]"""
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from sensitivity_rank import spearman  # noqa: E402

E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])
UNITS = {"self_attn.q_proj": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
         "self_attn.o_proj": ["self_attn.o_proj"], "mlp.gate_proj": ["mlp.gate_proj", "mlp.up_proj"],
         "mlp.down_proj": ["mlp.down_proj"]}


def fake_nvfp4(w, gs):
    r, c = w.shape
    x = w.reshape(r, c // 16, 16)
    s8 = ((x.abs().amax(-1) / 6) * gs).clamp(max=448).to(torch.float8_e4m3fn).float()
    eff = (torch.where(s8 == 0, torch.tensor(0.125), s8) / gs).unsqueeze(-1)
    y = x / eff
    q = E2M1[(y.abs().unsqueeze(-1) - E2M1).abs().argmin(-1)] * y.sign()
    return (q * eff).reshape(r, c)


def unit_stats(weights, layer, role, kl):
    ws = [weights[f"model.layers.{layer}.{n}.weight"].float() for n in UNITS[role]]
    gs = 2688.0 / max(w.abs().max().item() for w in ws)
    err = sum(((w - fake_nvfp4(w, gs)) ** 2).sum().item() for w in ws)
    flat = torch.cat([w.flatten() for w in ws])
    m2 = flat.pow(2).mean()
    k = kl[f"model.layers.{layer}.{role}"]
    return {"layer": layer, "role": role, "params": k["params"], "kl4": k["nvfp4"], "kl8": k["fp8"],
            "abs": err, "rel": err / flat.pow(2).sum().item(), "kurt": (flat.pow(4).mean() / m2 ** 2).item(),
            "peak": (flat.abs().max() / m2.sqrt()).item()}


# each score: what NVFP4 costs a unit; FP8 is taken to cost the same times 0.04 (its relative
# error over NVFP4's, ~3.5e-4 / 8.9e-3 on this model, near constant), kept nothing
SCORES = {"err/energy (today)": lambda u: u["rel"], "err": lambda u: u["abs"], "kurtosis": lambda u: u["kurt"],
          "peak": lambda u: u["peak"], "err x kurtosis": lambda u: u["abs"] * u["kurt"],
          "err x kurtosis^2": lambda u: u["abs"] * u["kurt"] ** 2, "params x kurtosis": lambda u: u["params"] * u["kurt"],
          "measured (oracle)": lambda u: u["kl4"]}


def nbytes(u):
    return [0.5625 * u["params"], 1.0 * u["params"], 2.0 * u["params"]]


def greedy_kl(units, score, extra):
    """plan --budget's greedy (score removed per byte added), the KL the measurements give its choice."""
    state, floor = [0] * len(units), sum(nbytes(u)[0] for u in units)
    used, budget = floor, floor * (1 + extra)
    while True:
        best = None
        for i, u in enumerate(units):
            s = score(u)
            costs = [s, 0.04 * s, 0.0]
            for to in range(state[i] + 1, 3):
                db = nbytes(u)[to] - nbytes(u)[state[i]]
                if used + db <= budget and (best is None or (costs[state[i]] - costs[to]) / db > best[0]):
                    best = ((costs[state[i]] - costs[to]) / db, i, to, db)
        if not best:
            return sum([u["kl4"], u["kl8"], 0.0][s] for u, s in zip(units, state))
        _, i, to, db = best
        state[i], used = to, used + db


def correlations(units, f, kl=None):
    kl = kl or {(u["layer"], u["role"]): (u["kl4"], u["kl8"]) for u in units}
    x = [f(u) for u in units]
    y = [kl[(u["layer"], u["role"])][0] for u in units]
    per_byte = [(a - b) / u["params"] for u, (a, b) in zip(units, (kl[(u["layer"], u["role"])] for u in units))]
    return spearman(x, y), spearman([a / u["params"] for a, u in zip(x, units)], per_byte)


def main():
    weights = load_file(os.path.join(sys.argv[1], "model.safetensors"))
    kl = json.load(open(sys.argv[2]))["groups"]
    layers = 1 + max(int(k.split(".")[2]) for k in kl)
    units = [unit_stats(weights, L, role, kl) for L in range(layers) for role in UNITS]
    other = None
    if len(sys.argv) > 3:
        k5 = json.load(open(sys.argv[3]))["groups"]
        other = {(u["layer"], u["role"]): (k5[f"model.layers.{u['layer']}.{u['role']}"]["nvfp4"],
                                           k5[f"model.layers.{u['layer']}.{u['role']}"]["fp8"]) for u in units}
    print(f"{len(units)} units; Spearman with the measured KL: per unit | per byte (the greedy's order)")
    for name, f in SCORES.items():
        a, b = correlations(units, f)
        ea, eb = correlations([u for u in units if u["layer"] % 2 == 0], f)
        oa, ob = correlations([u for u in units if u["layer"] % 2 == 1], f)
        line = f"  {name:20s} {a:+.2f} | {b:+.2f}   even layers {ea:+.2f} | {eb:+.2f}   odd {oa:+.2f} | {ob:+.2f}"
        if other:
            line += "   512 tokens {:+.2f} | {:+.2f}".format(*correlations(units, f, other))
        print(line)
    print("the greedy on the measured per-unit KLs (additive), KL of its choice:")
    for extra in (0.05, 0.15, 0.30, 0.40):
        print(f"  +{extra:.0%} bytes: " + "  ".join(f"{n} {greedy_kl(units, f, extra):.4f}" for n, f in SCORES.items()))


if __name__ == "__main__":
    main()

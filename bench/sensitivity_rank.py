"""Whether `fp4forge plan --budget`'s per-unit scores order the units as the measured KL does
(bench/sensitivity_kl.py): the budget only needs the ranking right (which units to give FP8
first), not the scale, hence Spearman rank correlation (ties take their average rank), for
NVFP4's cost, FP8's, the saving FP8 buys (nvfp4 - fp8), and that saving per byte FP8 adds: the
order the budget's greedy upgrades in.
usage: sensitivity_rank.py KL_JSON PLAN_JSON   (PLAN_JSON: fp4forge plan BF16 --budget SIZE --json)"""
import json, sys


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else float("nan")


def members(u):
    """A unit's module names: "modules", or "module" as plan --json writes a fused one
    ("model.layers.0.self_attn.k_proj+q_proj+v_proj"); any of them finds the unit, since
    the measured groups are keyed by q_proj and gate_proj, which need not come first."""
    if "modules" in u:
        return [m.removesuffix(".weight") for m in u["modules"]]
    prefix, _, last = u["module"].rpartition(".")
    return [f"{prefix}.{m}" if prefix else m for m in last.split("+")]


def main(kl_json, plan_json):
    kl = json.load(open(kl_json))["groups"]
    units = json.load(open(plan_json))["budget"]["units"]
    score = {m: u["score"] for u in units for m in members(u)}
    # bytes FP8 adds over NVFP4A16: the greedy ranks saving per byte, not saving
    cost = {m: u["bytes"]["fp8"] - u["bytes"]["nvfp4a16"] for u in units for m in members(u)}
    common = [g for g in kl if g in score]
    if not common:
        sys.exit("no unit of the plan matches a measured group")
    skipped = len(kl) - len(common)
    print(f"{len(common)} units matched" + (f", {skipped} measured groups not in the plan" if skipped else ""))
    m = {s: [kl[g][s] for g in common] for s in ("nvfp4", "fp8")}
    p = {s: [score[g][s] for g in common] for s in ("nvfp4", "fp8")}
    print(f"spearman nvfp4 KL vs score.nvfp4: {spearman(m['nvfp4'], p['nvfp4']):+.3f}")
    print(f"spearman fp8 KL vs score.fp8: {spearman(m['fp8'], p['fp8']):+.3f}")
    gain = spearman([x - y for x, y in zip(m["nvfp4"], m["fp8"])], [x - y for x, y in zip(p["nvfp4"], p["fp8"])])
    print(f"spearman (nvfp4 - fp8) KL vs (score.nvfp4 - score.fp8): {gain:+.3f}")
    c = [cost[g] for g in common]
    per_byte = spearman([(x - y) / b for x, y, b in zip(m["nvfp4"], m["fp8"], c)],
                        [(x - y) / b for x, y, b in zip(p["nvfp4"], p["fp8"], c)])
    print(f"spearman per byte FP8 adds, (nvfp4 - fp8) KL vs (score.nvfp4 - score.fp8): {per_byte:+.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])

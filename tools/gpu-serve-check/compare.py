"""Compares the runs that run_vllm.py wrote, per family, and prints one table.
usage: compare.py OUT.md FAMILY.json [FAMILY.json ...]
Per family (runs labelled bf16, q, dq): for the pairs q-bf16, q-dq, dq-bf16 and bf16-hf
(transformers' bf16 scoring): max and mean |diff| of the prompt tokens' logprobs (47 per
prompt x 4 prompts), greedy tokens equal (all 4 prompts, 16 tokens each) or from which token
they part; each run: all logprobs finite, the kernels, init seconds. Also writes OUT.json."""
import json, math, os, sys


def diffs(a, b):
    d = [abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra[1:], rb[1:])
         if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
    n_all = sum(len(r) - 1 for r in a)
    return (max(d) if d else None, sum(d) / len(d) if d else None, len(d), n_all)


def tokens_equal(a, b):
    out = []
    for ta, tb in zip(a, b):
        k = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
        out.append("=" if k is None and len(ta) == len(tb) else f"@{k}")
    return out


def main():
    md_path, files = sys.argv[1], sys.argv[2:]
    summary, md = {}, []
    for f in files:
        fam = os.path.basename(f).rsplit(".", 1)[0]
        try:
            res = json.load(open(f))
        except Exception as e:  # noqa: BLE001
            summary[fam] = {"error": f"cannot read {f}: {e!r}"}
            md.append(f"## {fam}\nno result: {e!r}\n")
            continue
        runs = {r["label"]: r for r in res.get("runs", [])}
        fs = {"vllm": res.get("vllm"), "torch": res.get("torch"), "torch_cuda": res.get("torch_cuda"),
              "device": res.get("device"), "runs": {}, "pairs": {}}
        md.append(f"## {fam}\n")
        md.append(f"vLLM {res.get('vllm')}, torch {res.get('torch')} (CUDA {res.get('torch_cuda')}), "
                  f"{res.get('device')}\n")
        md.append("| run | finite | init s | kernels |\n|---|---|---|---|")
        for label, r in runs.items():
            if "error" in r:
                last = [l for l in r["error"].strip().splitlines() if l.strip()][-1:]
                fs["runs"][label] = {"error": r["error"][-1500:]}
                md.append(f"| {label} | ERROR | | {last[0][:300] if last else ''} |")
                continue
            fs["runs"][label] = {"all_finite": r["all_finite"], "init_s": r.get("init_s"),
                                 "generate_s": r.get("generate_s"), "kernels": r.get("kernels"),
                                 "log": r.get("log"), "n_values": r.get("n_values")}
            ks = "; ".join(f"{k} x{v}" for k, v in (r.get("kernels") or {}).items())
            md.append(f"| {label} | {r['all_finite']} | {r.get('init_s')} | {ks} |")
        md.append("")
        pl = {k: r["prompt_logprobs"] for k, r in runs.items() if "prompt_logprobs" in r}
        tk = {k: r["tokens"] for k, r in runs.items() if "tokens" in r}
        if "hf" in res:
            pl["hf"] = res["hf"]
        elif "hf_error" in res:
            fs["hf_error"] = res["hf_error"][-1500:]
        md.append("| pair | max abs diff (prompt logprobs) | mean abs diff | n | greedy tokens |\n"
                  "|---|---|---|---|---|")
        for a, b in (("q", "bf16"), ("q", "dq"), ("dq", "bf16"), ("bf16", "hf")):
            if a in pl and b in pl:
                mx, mean, n, n_all = diffs(pl[a], pl[b])
                te = tokens_equal(tk[a], tk[b]) if a in tk and b in tk else None
                fs["pairs"][f"{a}-{b}"] = {"max_abs": mx, "mean_abs": mean, "n": n, "n_all": n_all,
                                           "tokens": te}
                fmt = (lambda x: "-" if x is None else f"{x:.4g}")
                md.append(f"| {a} vs {b} | {fmt(mx)} | {fmt(mean)} | {n}/{n_all} | "
                          f"{' '.join(te) if te else '-'} |")
        md.append("")
        logs = sorted({l for r in runs.values() for l in (r.get("log") or [])})
        if logs:
            md.append("log lines naming kernels/backends:\n```")
            md.extend(logs[:40])
            md.append("```\n")
        summary[fam] = fs
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.splitext(md_path)[0] + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    print("\n".join(md))


if __name__ == "__main__":
    main()

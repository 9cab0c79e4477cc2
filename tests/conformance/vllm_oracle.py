"""vLLM itself as the oracle for fp4forge's NVFP4A16 output (issue 13), one process for all.
usage: vllm_oracle.py WORK --models NAME... --neg NAME --refuse-dense NAME --refuse-moe NAME [--unpaired NAME]
Reads WORK/NAME/{bf16,q,dq} (bf16 source, fp4forge quantize, fp4forge dequantize of q) and
WORK/neg/{q,dq} (q of --neg with one k_proj global scale doubled, and its dequantization).
Runs vllm.LLM on CPU (enforce_eager, bf16, in-process engine) with fp4forge's TEST plugin
(tests/vllm) and prints one PASS/FAIL line per check; figures also go to WORK/vllm_oracle.json.
- vllm_NAME_plugin_path: vLLM chose its compressed-tensors NVFP4 W4A16 scheme and the plugin
  did only the last step (counts of layers), and the dequantized copy loads as plain bf16.
- vllm_NAME_q_equals_dequant: prompt logprobs (each position's token and top-5, every value),
  greedy tokens, their logprobs and text of q equal those of dq exactly (max |diff| 0).
- vllm_NAME_vs_bf16: q against the bf16 source, reported; gate only on gross breakage
  (non-finite, or max |diff| of the prompt tokens' logprobs above 1 nat).
- vllm_neg_*: the tampered copy gets vLLM's parallel-layers global-scale warning and logprobs
  unequal to the untouched q (and, info, to compressed-tensors' reading of the same copy).
- vllm_unpatched_refuses_{dense,moe}: with the plugin's fallback off (FP4FORGE_VLLM_CPU_NVFP4),
  vLLM CPU still refuses with the known error; a FAIL here means vLLM changed (e.g. gained a
  native CPU NVFP4 path): look at it, then update this test and the plugin."""
import argparse, gc, json, logging, math, os, random, sys, time, traceback

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: verdict lines only

PARALLEL_WARNING = "weight global scale is different for parallel layers"
DENSE_REFUSAL = "Marlin FP4 not available"
MOE_REFUSAL = "No NvFp4 MoE backend supports the deployment configuration"
# vLLM keeps one global scale for an expert's w13 (the gate's) and says so once
W13_WARNING = "w1_weight_global_scale must match w3_weight_global_scale"
MAX_TOKENS = 16
TOPK = 5

rc = 0
report = {}


def line(ok, name, details):
    global rc
    if not ok:
        rc = 1
    print(f"{'PASS' if ok else 'FAIL'} {name} ({details})", flush=True)


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        try:
            self.messages.append(record.getMessage())
        except Exception:
            pass


def census(model):
    counts = {}
    for _, mod in model.named_modules():
        tag = getattr(mod, "fp4forge_test_dequantized", None)
        if tag:
            counts[tag] = counts.get(tag, 0) + 1
        scheme = getattr(mod, "scheme", None)
        if scheme is not None:
            key = type(scheme).__name__ + ("(use_a16)" if getattr(scheme, "use_a16", False) else "")
            counts[key] = counts.get(key, 0) + 1
    return counts


# a real trained model (a tokenizer and a real vocabulary) reads English; random token ids
# are what the tiny random models get, and a trained one would score them as noise
TEXTS = ["The capital of France is Paris, and the capital of Germany is Berlin. The capital of Italy is",
         "A language model predicts the next word from the words before it. When the weights are stored"]


def real_text(path, vocab):
    return vocab >= 32000 and os.path.exists(os.path.join(path, "tokenizer.json"))


def prompts_for(vocab, path=None):
    if path and real_text(path, vocab):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path)
        return [{"prompt_token_ids": tok(t).input_ids} for t in TEXTS]
    rnd = random.Random(0)
    return [{"prompt_token_ids": [2] + [rnd.randrange(6, vocab) for _ in range(n)]}
            for n in (31, 23)]


def run(path, prompts):
    from vllm import LLM, SamplingParams
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    # the tiny MoE families' configs say 128 positions; the prompts need 48
    max_len = min(256, cfg.get("text_config", cfg).get("max_position_embeddings", 256))
    kw = {"language_model_only": True} if "ConditionalGeneration" in arch else {}
    # the MoE families' tiny models carry no tokenizer: token ids in, token ids out
    has_tok = any(os.path.exists(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer.model"))
    if not has_tok:
        kw["skip_tokenizer_init"] = True
    llm = LLM(model=path, dtype="bfloat16", enforce_eager=True, max_model_len=max_len,
              max_num_seqs=4, seed=0, **kw)
    try:
        sp = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, prompt_logprobs=TOPK,
                            logprobs=TOPK, ignore_eos=True, detokenize=has_tok)
        outs = llm.generate(prompts, sp, use_tqdm=False)
        res = []
        for p, o in zip(prompts, outs):
            ids = p["prompt_token_ids"]
            c = o.outputs[0]
            res.append({
                "prompt": [{t: lp.logprob for t, lp in d.items()} for d in o.prompt_logprobs[1:]],
                "prompt_tok": [d[t].logprob for d, t in zip(o.prompt_logprobs[1:], ids[1:])],
                "tokens": list(c.token_ids),
                "gen": [{t: lp.logprob for t, lp in d.items()} for d in c.logprobs],
                "text": c.text,
            })
        res_census = llm.apply_model(census)[0]
        return res, res_census
    finally:
        del llm
        gc.collect()


def compare_exact(a, b):
    """max |diff| over every logprob both hold, and whether keys, tokens and text match."""
    mx, n, same_keys = 0.0, 0, True
    for ra, rb in zip(a, b):
        for da, db in zip(ra["prompt"] + ra["gen"], rb["prompt"] + rb["gen"]):
            if set(da) != set(db):
                same_keys = False
            for t in set(da) & set(db):
                d = abs(da[t] - db[t]) if math.isfinite(da[t]) and math.isfinite(db[t]) else math.inf
                mx, n = max(mx, d), n + 1
    tokens = all(ra["tokens"] == rb["tokens"] for ra, rb in zip(a, b))
    text = all(ra["text"] == rb["text"] for ra, rb in zip(a, b))
    return mx, n, same_keys, tokens, text


def prompt_tok_diff(a, b):
    diffs = [abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra["prompt_tok"], rb["prompt_tok"])]
    finite = all(math.isfinite(x) for r in a + b for x in r["prompt_tok"])
    return max(diffs), sum(diffs) / len(diffs), len(diffs), finite


def first_divergence(a, b):
    out = []
    for ra, rb in zip(a, b):
        k = next((i for i, (x, y) in enumerate(zip(ra["tokens"], rb["tokens"])) if x != y), None)
        out.append("equal" if k is None else f"differ from token {k}")
    return ", ".join(out)


def guarded(name, fn):
    try:
        fn()
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        line(False, name, f"crashed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")


def check_model(work, name, results):
    base = os.path.join(work, name)
    with open(os.path.join(base, "bf16", "config.json")) as f:
        cfg = json.load(f)
    vocab = cfg.get("text_config", cfg)["vocab_size"]
    prompts = prompts_for(vocab, os.path.join(base, "bf16"))
    english = real_text(os.path.join(base, "bf16"), vocab)
    t0 = time.time()
    got = {}
    cap = Capture()
    logging.getLogger("vllm").addHandler(cap)
    try:
        for kind in ("q", "dq", "bf16"):
            got[kind] = run(os.path.join(base, kind), prompts)
    finally:
        logging.getLogger("vllm").removeHandler(cap)
    (q, cq), (dq, cdq), (bf, _) = got["q"], got["dq"], got["bf16"]
    results[name] = {"q": q, "census_q": cq, "census_dq": cdq}
    lin = cq.get("nvfp4-linear", 0)
    moe = cq.get("nvfp4-moe", 0)
    schemes = {k: v for k, v in cq.items() if not k.startswith("nvfp4-")}
    want_moe = name.endswith("moe") or name in ("mixtral", "llama4", "llama4_text", "qwen3_next", "glm4_moe_lite")
    ok = (lin > 0 and schemes.get("CompressedTensorsW4A4Fp4(use_a16)", 0) == lin
          and (moe > 0) == want_moe and not cdq)
    parallel = [m for m in cap.messages if PARALLEL_WARNING in m]
    line(not parallel, f"vllm_{name}_no_parallel_gscale_warning",
         parallel[0][:120] if parallel else f"no '{PARALLEL_WARNING}' while loading it")
    if want_moe:
        w13 = [m for m in cap.messages if W13_WARNING in m]
        line(not w13, f"vllm_{name}_no_w13_gscale_warning",
             w13[0][:120] if w13 else f"no '{W13_WARNING}' while loading fp4forge's output")
    line(ok, f"vllm_{name}_plugin_path",
         f"q: vLLM schemes {schemes}, plugin dequantized {lin} linear + {moe} MoE layers; "
         f"dq: {'plain bf16' if not cdq else cdq}")
    mx, n, keys, tokens, text = compare_exact(q, dq)
    r = report.setdefault(name, {})
    r.update(q_vs_dq_max_abs=mx, q_vs_dq_values=n, greedy_tokens_equal=tokens, text_equal=text)
    line(mx == 0 and keys and tokens and text and n > 0, f"vllm_{name}_q_equals_dequant",
         f"max |logprob diff| {mx:g} over {n} logprobs (prompt + top-{TOPK} + {MAX_TOKENS} "
         f"greedy, 2 prompts); top-{TOPK} sets equal: {keys}; greedy tokens equal: {tokens}; "
         f"text equal: {text}")
    bmx, bmean, bn, finite = prompt_tok_diff(q, bf)
    _, _, _, btok, btext = compare_exact(q, bf)
    r.update(vs_bf16_max_abs=bmx, vs_bf16_mean_abs=bmean, vs_bf16_greedy_equal=btok,
             vs_bf16_text_equal=btext, seconds=round(time.time() - t0, 1))
    # gross breakage only: a token's logprob off by more than 1 nat on a tiny random model; on
    # a trained one reading English (where NVFP4 moves some tokens by more), the mean
    gross = bmean > 1.0 if english else bmx > 1.0
    line(finite and not gross, f"vllm_{name}_vs_bf16",
         f"reported: prompt-token logprob max |diff| {bmx:.4f} mean {bmean:.4f} over {bn}"
         f"{' (English prompts; gate: the mean)' if english else ''}; "
         f"greedy tokens equal: {'yes' if btok else 'no'} ({first_divergence(q, bf)}); "
         f"text equal: {'yes' if btext else 'no'}; 3 engines in {time.time() - t0:.1f}s")


def run_capturing(work, name, path):
    """Runs the checkpoint at PATH on NAME's prompts; returns (prompts, results, the
    warnings vLLM logged meanwhile)."""
    cap = Capture()
    logging.getLogger("vllm").addHandler(cap)
    try:
        with open(os.path.join(work, name, "bf16", "config.json")) as f:
            cfg = json.load(f)
        prompts = prompts_for(cfg.get("text_config", cfg)["vocab_size"])
        res, _ = run(path, prompts)
    finally:
        logging.getLogger("vllm").removeHandler(cap)
    return prompts, res, cap.messages


def check_neg(work, name, results):
    prompts, neg, messages = run_capturing(work, name, os.path.join(work, "neg", "q"))
    warned = [m for m in messages if PARALLEL_WARNING in m]
    line(bool(warned), "vllm_neg_warns_parallel_gscale",
         (warned[0][:160] if warned else f"no warning containing '{PARALLEL_WARNING}'"))
    ref = results.get(name, {}).get("q")
    if ref is None:
        ref, _ = run(os.path.join(work, name, "q"), prompts)
    mx, n, _, tokens, _ = compare_exact(neg, ref)
    pmx, pmean, _, _ = prompt_tok_diff(neg, ref)
    dq, _ = run(os.path.join(work, "neg", "dq"), prompts)
    cmx, _, _, _ = prompt_tok_diff(neg, dq)
    report["neg"] = {"vs_untouched_max_abs": mx, "vs_untouched_prompt_mean": pmean,
                     "greedy_equal": tokens, "vs_ct_dequant_max_abs": cmx}
    line(mx > 0, "vllm_neg_logprobs_differ",
         f"tampered vs untouched q: max |logprob diff| {mx:.4f} (prompt tokens max {pmx:.4f} "
         f"mean {pmean:.4f}), greedy tokens equal: {'yes' if tokens else 'no'}; info: vLLM "
         f"(one 1/max scale for q/k/v) vs compressed-tensors' reading of the same copy: "
         f"prompt max |diff| {cmx:.4f}")


def check_unpaired(work, name, results):
    """llm-compressor model_free_ptq's output of NAME (WORK/NAME/mfp), whose experts'
    gate/up carry a global scale each: vLLM warns and serves up_proj with the gate's
    scale. Run after every model of ours, since vLLM says it once a process."""
    _, theirs, messages = run_capturing(work, name, os.path.join(work, name, "mfp"))
    w13 = [m for m in messages if W13_WARNING in m]
    line(bool(w13), f"vllm_{name}_model_free_ptq_warns_w13",
         (w13[0][:120] if w13 else f"no '{W13_WARNING}'") + " (llm-compressor model_free_ptq output)")
    ours = results.get(name, {}).get("q")
    if ours is not None:
        mx, _, _, tokens, _ = compare_exact(theirs, ours)
        print(f"# {name}: model_free_ptq output vs fp4forge's in vLLM: max |logprob diff| {mx:.4f}, "
              f"greedy equal: {tokens}", file=sys.stderr)


def check_refusal(work, name, mode, label, want):
    os.environ["FP4FORGE_VLLM_CPU_NVFP4"] = mode
    try:
        run(os.path.join(work, name, "q"), prompts_for(256))
    except Exception as e:
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:220]
        report[f"refusal_{label}"] = msg
        line(want in msg, f"vllm_unpatched_refuses_{label}",
             f"{name} with FP4FORGE_VLLM_CPU_NVFP4={mode}: {msg}")
        return
    finally:
        os.environ["FP4FORGE_VLLM_CPU_NVFP4"] = "1"
        gc.collect()
    report[f"refusal_{label}"] = None
    line(False, f"vllm_unpatched_refuses_{label}",
         f"{name} with FP4FORGE_VLLM_CPU_NVFP4={mode} LOADED: vLLM's CPU build no longer "
         f"refuses (native path?); review tests/vllm's plugin and this test")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--neg", required=True)
    ap.add_argument("--refuse-dense", required=True)
    ap.add_argument("--refuse-moe", required=True)
    ap.add_argument("--unpaired", help="a model whose WORK/NAME/mfp is model_free_ptq's output")
    a = ap.parse_args()
    t0 = time.time()
    import vllm
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    import fp4forge_vllm_cpu_nvfp4  # noqa: F401  (installed by tests/vllm/install_plugin.sh)
    print(f"# vllm {vllm.__version__} imported in {time.time() - t0:.1f}s", file=sys.stderr)
    results = {}
    for name in a.models:
        guarded(f"vllm_{name}", lambda: check_model(a.work, name, results))
    guarded("vllm_neg", lambda: check_neg(a.work, a.neg, results))
    if a.unpaired:
        guarded(f"vllm_{a.unpaired}_model_free_ptq",
                lambda: check_unpaired(a.work, a.unpaired, results))
    # last: a refused construction may leave state behind
    guarded("vllm_unpatched_refuses_dense",
            lambda: check_refusal(a.work, a.refuse_dense, "0", "dense", DENSE_REFUSAL))
    guarded("vllm_unpatched_refuses_moe",
            lambda: check_refusal(a.work, a.refuse_moe, "dense", "moe", MOE_REFUSAL))
    report["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(a.work, "vllm_oracle.json"), "w") as f:
        json.dump(report, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())

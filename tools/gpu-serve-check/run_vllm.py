"""Serves a few checkpoints of one model family through vLLM's offline LLM on the GPU, one
after another in this process, and records greedy tokens, prompt logprobs and the kernels
vLLM chose. usage:
  run_vllm.py OUT.json VOCAB [--hf HF_BF16_DIR] [--gen N] LABEL=DIR [LABEL=DIR ...]
Each LABEL=DIR is served with enforce_eager, max_model_len 256, token-id prompts
(skip_tokenizer_init) and, for Gemma-4 (a ConditionalGeneration class), language_model_only
(the towers are not built). KV cache: a fixed 1 GiB (kv_cache_memory_bytes), so that several
of these processes can share the GPU without upsetting vLLM's memory profiling. The prompts
are 4 fixed pseudo-random token sequences of 48 ids (BOS first). Greedy, --gen new tokens
(default 16, ignore_eos), prompt_logprobs and logprobs of the chosen tokens.
--hf: also score the prompts with transformers (bf16, same GPU) as a reference.
Per model: init/generate seconds, the kernels found on the loaded model (apply_model: each
Linear's quant scheme and kernel class, each MoE layer's quant method / NVFP4 backend / expert
class, each attention layer's backend), vLLM's log lines that name a kernel or backend, and
whether every logprob is finite. Writes OUT.json after every model, so a crash keeps what
came before."""
import gc, json, logging, math, os, re, sys, time, traceback
from collections import Counter

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
# flashinfer is not carried (README.md); its sampler import is unguarded in 0.26's runner
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

KERNEL_LOG = re.compile(r"Marlin|NVFP4|NvFp4|nvfp4|FP4|backend|Backend|TRITON_ATTN|FLASH_ATTN|"
                        r"FlashAttention|heterogeneous head|global scale|Using ", re.I)


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001
            return
        if KERNEL_LOG.search(msg):
            self.lines.append(f"{record.levelname} {record.name}: {msg[:400]}")


def prompts(vocab, n=4, length=48):
    import random
    r = random.Random(1234)
    return [[2] + [r.randrange(6, vocab) for _ in range(length - 1)] for _ in range(n)]


def kernels_of(model):
    c = Counter()
    for name, m in model.named_modules():
        cls = type(m).__name__
        scheme = getattr(m, "scheme", None)
        if scheme is not None:
            k = getattr(scheme, "kernel", None)
            a16 = "(use_a16)" if getattr(scheme, "use_a16", False) else ""
            c[f"linear {type(scheme).__name__}{a16} -> {type(k).__name__ if k is not None else '-'}"] += 1
            continue
        qm = getattr(m, "quant_method", None)
        if qm is not None and ("MoE" in cls or "Experts" in cls or "MoE" in type(qm).__name__):
            parts = [type(qm).__name__]
            for a in ("nvfp4_backend", "unquantized_backend", "moe_backend", "experts_cls"):
                v = getattr(qm, a, None)
                if v is not None:
                    parts.append(f"{a}={getattr(v, '__name__', None) or getattr(v, 'name', None) or v}")
            mk = getattr(qm, "moe_kernel", None) or getattr(qm, "kernel", None)
            if mk is not None:
                fe = getattr(mk, "fused_experts", None)
                parts.append(f"kernel={type(mk).__name__}" + (f"/{type(fe).__name__}" if fe is not None else ""))
            c["moe " + " ".join(parts)] += 1
            continue
        if qm is not None and "Linear" in cls:
            c[f"linear {type(qm).__name__}"] += 1
        ab = getattr(m, "attn_backend", None)
        if ab is not None and hasattr(m, "head_size"):
            try:
                bn = ab.get_name()
            except Exception:  # noqa: BLE001
                bn = getattr(ab, "__name__", str(ab))
            c[f"attention {bn} head_size={m.head_size}"] += 1
    return dict(c)


def hf_reference(d, ps):
    import torch, transformers
    cfg = json.load(open(os.path.join(d, "config.json")))
    cls = getattr(transformers, cfg["architectures"][0])
    m = cls.from_pretrained(d, dtype=torch.bfloat16).cuda().eval()
    out = []
    with torch.no_grad():
        for p in ps:
            ids = torch.tensor([p], device="cuda")
            lo = m(input_ids=ids).logits.float().log_softmax(-1)[0]
            out.append([None] + [lo[i - 1, p[i]].item() for i in range(1, len(p))])
    del m
    gc.collect()
    torch.cuda.empty_cache()
    return out


def legacy_overrides(d):
    """vLLM 0.26 + transformers 5.17 on Gemma-4 with two head dims: transformers turns the
    legacy global_head_dim / num_global_key_value_heads into per_layer_config on load (the
    attributes are gone) and then refuses config.head_dim (AmbiguousGlobalPerLayerAttribute-
    Error), which vLLM's ModelConfig reads. Seen on the H200 in the first full run. This puts
    the legacy attributes back from config.json and allows the global read, i.e. vLLM sees
    the config it was written for. None when config.json has no legacy fields."""
    raw = json.load(open(os.path.join(d, "config.json")))
    text = raw.get("text_config", raw)
    legacy = {k: text[k] for k in ("global_head_dim", "num_global_key_value_heads") if k in text}
    if not legacy:
        return None

    def fix(config):
        for c in (config, getattr(config, "text_config", None)):
            if c is None:
                continue
            try:
                c.allow_global_per_layer_attribute_access = True
            except Exception:  # noqa: BLE001
                pass
        t = getattr(config, "text_config", config)
        for k, v in legacy.items():
            setattr(t, k, v)
        return config
    return fix


def serve(label, d, ps, gen, cap):
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    rec = {"label": label, "dir": d}
    cap.lines = []
    t0 = time.time()
    kw = dict(model=d, dtype="bfloat16", enforce_eager=True, max_model_len=256, max_num_seqs=8,
              max_num_batched_tokens=512, gpu_memory_utilization=0.1,
              kv_cache_memory_bytes=1 << 30, skip_tokenizer_init=True, seed=0)
    cfg = json.load(open(os.path.join(d, "config.json")))
    if "ConditionalGeneration" in cfg["architectures"][0]:
        kw["language_model_only"] = True
        # vLLM 0.26 picks FA4 for Gemma-4's two head dims on Hopper whenever its FA build
        # says v4 is supported, but FA4 runs on nvidia-cutlass-dsl, which is not carried
        # (seen on the H200: "No module named 'cutlass'" in the first forward): Triton, the
        # backend vLLM itself falls back to without FA4
        kw["attention_backend"] = os.environ.get("GSC_GEMMA4_ATTN", "TRITON_ATTN")
    fix = legacy_overrides(d)
    if fix is not None and os.environ.get("GSC_NO_OVERRIDES") != "1":
        kw["hf_overrides"] = fix
        rec["hf_overrides"] = "legacy global_head_dim / num_global_key_value_heads put back"
    llm = LLM(**kw)
    rec["init_s"] = round(time.time() - t0, 1)
    try:
        rec["kernels"] = llm.apply_model(kernels_of)[0]
    except Exception as e:  # noqa: BLE001
        rec["kernels_error"] = repr(e)
    sp = SamplingParams(temperature=0.0, max_tokens=gen, ignore_eos=True, logprobs=1,
                        prompt_logprobs=1, detokenize=False)
    t0 = time.time()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ps], sp, use_tqdm=False)
    rec["generate_s"] = round(time.time() - t0, 2)
    rec["prompt_logprobs"], rec["tokens"], rec["token_logprobs"] = [], [], []
    for p, o in zip(ps, outs):
        pl = [None]
        for i in range(1, len(p)):
            e = o.prompt_logprobs[i]
            pl.append(e[p[i]].logprob if e is not None and p[i] in e else None)
        rec["prompt_logprobs"].append(pl)
        c = o.outputs[0]
        rec["tokens"].append(list(c.token_ids))
        rec["token_logprobs"].append([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
    vals = [x for row in rec["prompt_logprobs"] for x in row[1:]] + \
           [x for row in rec["token_logprobs"] for x in row]
    rec["all_finite"] = all(x is not None and math.isfinite(x) for x in vals)
    rec["n_values"] = len(vals)
    fin = [v for v in vals if v is not None and math.isfinite(v)]
    rec["mean_logprob"] = sum(fin) / max(1, len(fin))
    rec["log"] = list(cap.lines)
    del llm
    gc.collect()
    try:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        cleanup_dist_env_and_memory()
    except Exception as e:  # noqa: BLE001
        rec["cleanup_error"] = repr(e)
    torch.cuda.empty_cache()
    return rec


def main():
    args = sys.argv[1:]
    out, vocab = args[0], int(args[1])
    hf, gen, models = None, 16, []
    i = 2
    while i < len(args):
        if args[i] == "--hf":
            hf = args[i + 1]; i += 2
        elif args[i] == "--gen":
            gen = int(args[i + 1]); i += 2
        else:
            models.append(args[i].split("=", 1)); i += 1
    ps = prompts(vocab)
    res = {"prompts": ps, "runs": []}
    cap = Capture()
    logging.getLogger("vllm").addHandler(cap)
    logging.getLogger().addHandler(cap)

    def dump():
        with open(out, "w") as f:
            json.dump(res, f)
    try:
        import torch, vllm
        res["vllm"] = vllm.__version__
        res["torch"] = torch.__version__
        res["torch_cuda"] = torch.version.cuda
        res["device"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        res["version_error"] = traceback.format_exc()[-2000:]
    for label, d in models:
        print(f"=== serving {label} ({d})", flush=True)
        try:
            res["runs"].append(serve(label, d, ps, gen, cap))
        except BaseException:  # noqa: BLE001
            tb = traceback.format_exc()
            print(tb, flush=True)
            res["runs"].append({"label": label, "dir": d, "error": tb[-4000:], "log": list(cap.lines)})
        dump()
        print(f"=== done {label}", flush=True)
    if hf:  # after vLLM, so that a transformers failure costs nothing else
        try:
            t0 = time.time()
            res["hf"] = hf_reference(hf, ps)
            res["hf_s"] = round(time.time() - t0, 1)
        except Exception:  # noqa: BLE001
            res["hf_error"] = traceback.format_exc()[-2000:]
        dump()


if __name__ == "__main__":
    main()

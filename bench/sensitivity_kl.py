"""What each unit of Linears costs when it alone is quantized, on the one real trained model
(SmolLM2-135M-Instruct, tests/conformance/real_model.sh): the ground truth that `fp4forge plan
--budget`'s per-unit scores should rank like. A unit is what fp4forge gives one global scale
and one scheme: per decoder layer q/k/v, o, gate/up, down (keyed by their first module).
Each unit in turn takes its weights from fp4forge's dequantized NVFP4 output, then from its
dequantized all-FP8 (weight-only, channel-wise) output, the rest staying bf16, and is scored
as real_model.py ppl scores (the text's first N tokens, windows of 512): KL(bf16 || q) per
token, mean. Swapping weights into one loaded model instead of loading 240 checkpoints keeps
it to one forward pass per measurement. Also: every unit NVFP4 at once, every unit FP8.
--fp32 runs the same bf16-valued weights with float32 activations: in bf16 the activations'
own rounding is a floor of about 0.001 KL for any change to one unit, even one ulp on half
its weights (0.0006-0.0017 measured), as large as FP8's whole cost on a middle layer; in
float32 that floor is ~1e-5, so only --fp32 ranks the small (FP8, mid-depth) costs.
usage: sensitivity_kl.py groups TEXT BF16_DIR NVFP4_DEQ_DIR FP8_DEQ_DIR OUT_JSON [--tokens N] [--fp32]
  NVFP4_DEQ_DIR: fp4forge quantize BF16 Q --no-doctor --quiet; fp4forge dequantize Q DEQ
  FP8_DEQ_DIR:   the same with quantize ... --fp8 '.*'"""
import glob, json, os, sys, time
import torch
import transformers as T
from safetensors import safe_open

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "conformance"))
from real_model import scores  # noqa: E402  the same windows and log-softmax as ppl

UNITS = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.o_proj",),
         ("mlp.gate_proj", "mlp.up_proj"), ("mlp.down_proj",))


def load_weights(d, names):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with safe_open(f, "pt") as st:
            for k in st.keys():
                if k.endswith(".weight") and k[:-len(".weight")] in names:
                    # FP8 modules dequantize into their scale's dtype: make every scheme bf16
                    out[k[:-len(".weight")]] = st.get_tensor(k).to(torch.bfloat16)
    missing = names - out.keys()
    if missing:
        sys.exit(f"{d}: no weight for {sorted(missing)[:3]}...")
    return out


def groups(text, bf16, nvfp4_dir, fp8_dir, out_json, tokens=2048, dtype=torch.bfloat16):
    torch.set_num_threads(2)
    tok = T.AutoTokenizer.from_pretrained(bf16)
    ids = tok(open(text).read(), return_tensors="pt").input_ids[:, :tokens + 1]
    model = T.AutoModelForCausalLM.from_pretrained(bf16, dtype=dtype).eval()
    mods = dict(model.named_modules())
    units = {f"model.layers.{i}.{u[0]}": [f"model.layers.{i}.{m}" for m in u]
             for i in range(model.config.num_hidden_layers) for u in UNITS}
    names = {m for ms in units.values() for m in ms}
    orig = {m: mods[m].weight.detach().clone() for m in names}
    q = {"nvfp4": load_weights(nvfp4_dir, names), "fp8": load_weights(fp8_dir, names)}
    ref = scores(model, ids)

    def kl(scheme, ms):
        t0 = time.time()
        for m in ms:
            mods[m].weight.data.copy_(q[scheme][m])
        lq = scores(model, ids)
        for m in ms:
            mods[m].weight.data.copy_(orig[m])
        return (ref.exp() * (ref - lq)).sum(-1).mean().item(), time.time() - t0

    res = {"tokens": ref.shape[0], "text": text, "activations": str(dtype).removeprefix("torch.")}
    for s in ("nvfp4", "fp8"):
        res[f"all_{s}"], dt = kl(s, names)
        print(f"all_{s}: KL {res[f'all_{s}']:.5f} ({dt:.1f} s)", file=sys.stderr, flush=True)
    res["groups"] = {}
    for g, ms in units.items():
        r = res["groups"][g] = {"params": sum(orig[m].numel() for m in ms)}
        for s in ("nvfp4", "fp8"):
            r[s], dt = kl(s, ms)
            print(f"{g} {s}: KL {r[s]:.5f} ({dt:.1f} s)", file=sys.stderr, flush=True)
    with open(out_json, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    a = sys.argv[1:]
    dt = torch.float32 if "--fp32" in a else torch.bfloat16
    a = [x for x in a if x != "--fp32"]
    n = 2048
    if "--tokens" in a:
        i = a.index("--tokens")
        n = int(a[i + 1])
        del a[i:i + 2]
    if len(a) != 6 or a[0] != "groups":
        sys.exit(__doc__)
    groups(*a[1:], tokens=n, dtype=dt)

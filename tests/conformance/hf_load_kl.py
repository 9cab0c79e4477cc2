"""Check (b): a quantized checkpoint loads through transformers + compressed-tensors with
no warning, no missing/unexpected keys, no NaN, and its logits stay close to the bf16
model's.
usage: hf_load_kl.py NAME Q_DIR REF_LOGITS_PT KL_MAX [--bf16 SRC_DIR] [--linearized]
  --bf16 SRC_DIR  also load the bf16 source: check it reproduces ref_logits (sanity) and
                  report KL on 64 extra seeded tokens
  --linearized    load the model under llm-compressor's linearized MoE definition
                  (llmcompressor.modeling.moe.linearize_moe applied to the empty model
                  before the quantized weights are loaded)
KL(bf16 || quantized) = sum_v p_ref * (log p_ref - log p_q), mean over token positions."""
import sys, os, warnings, logging, argparse, io
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ap = argparse.ArgumentParser()
ap.add_argument("name"); ap.add_argument("qdir"); ap.add_argument("ref"); ap.add_argument("kl_max", type=float)
ap.add_argument("--bf16"); ap.add_argument("--linearized", action="store_true"); ap.add_argument("--peer")
# the peer's norms differ by llm-compressor's offset-norm round trip (llmc_compare.py
# --offset-norms checks each bit for bit): its logits are compared once with its own norms
# (reported) and once with fp4forge's norms put back (must be equal)
ap.add_argument("--peer-offset-norms", action="store_true")
a = ap.parse_args()

import torch
import transformers
from transformers import AutoModelForImageTextToText
from transformers.utils import logging as hf_logging
rc = 0
def res(ok, check, msg):
    global rc
    print(f"{'PASS' if ok else 'FAIL'} {a.name}_{check} {msg}", flush=True)
    rc |= (not ok)

if a.linearized:
    from llmcompressor.modeling.moe.linearize import get_non_linearized_moes
    from llmcompressor.modeling.moe.linear_experts import LinearExperts2D

# capture every channel a warning can come through during the load
caught = []
hf_logging.set_verbosity_warning()
class H(logging.Handler):
    def emit(self, r):
        if r.levelno >= logging.WARNING:
            caught.append(f"logging[{r.name}] {r.levelname}: {r.getMessage()}")
h = H(); logging.getLogger().addHandler(h); hf_logging.get_logger().addHandler(h)
try:
    from loguru import logger as loguru_logger
    loguru_logger.add(lambda m: caught.append(f"loguru {m.record['level'].name}: {m.record['message']}"),
                      level="WARNING")
except ImportError:
    pass

def kl(ref_logits, q_logits):
    lp = torch.log_softmax(ref_logits.float(), -1); lq = torch.log_softmax(q_logits.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).mean().item()

ref = torch.load(a.ref)
ids = ref["ids"]
g = torch.Generator().manual_seed(1234)
extra = torch.randint(3, ref["logits"].shape[-1], (1, 64), generator=g)

with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    if a.linearized:
        # Right after the (empty, meta-device) model is built and before transformers
        # applies the compressed-tensors config and loads weights, every fused experts
        # module is replaced by llm-compressor's linearized definition (the
        # LinearExperts2D class linearize_moe would build; weights are not copied since
        # they come from the checkpoint, and linearize_moe's copy/offload step does not
        # work on meta tensors).
        def linearize_empty(model):
            for mname, mod in get_non_linearized_moes(model):
                lcls = LinearExperts2D.get_linear_experts_cls(mod.__class__)
                model.set_submodule(mname, lcls(getattr(mod, "config", model.config)))
        # the class the auto loader builds for this config (Gemma-4's multimodal
        # model, or a causal LM under causal_lm.py)
        cfg = transformers.AutoConfig.from_pretrained(a.qdir)
        model_cls = AutoModelForImageTextToText._model_mapping[type(cfg)]
        orig_post = model_cls.post_init
        def post_init(self):
            orig_post(self)
            if not getattr(self, "_ff_linearized", False) and type(self) is model_cls:
                self._ff_linearized = True
                linearize_empty(self)
        model_cls.post_init = post_init
        try:
            model, info = AutoModelForImageTextToText.from_pretrained(a.qdir, dtype=torch.bfloat16, output_loading_info=True)
        finally:
            model_cls.post_init = orig_post
    else:
        model, info = AutoModelForImageTextToText.from_pretrained(a.qdir, dtype=torch.bfloat16, output_loading_info=True)
    model.eval()
    for w in ws:
        caught.append(f"warnings {w.category.__name__}: {str(w.message).strip()[:300]}")
for c in caught:
    print(f"  load warning: {c}")
res(not caught, "load_no_warning", f"warnings during load: {len(caught)}")
bad_keys = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
for k, v in bad_keys.items():
    print(f"  {k}: {len(v)} e.g. {sorted(map(str, v))[:4]}")
res(not bad_keys, "load_keys", "missing/unexpected/mismatched keys: " +
    (", ".join(f"{k}={len(v)}" for k, v in bad_keys.items()) or "none"))
# the loaded modules really are the quantized ones (not a silently bf16-initialised model)
nq = sum(1 for _, m in model.named_modules() if getattr(m, "quantization_scheme", None) is not None)
print(f"  modules with a quantization_scheme after load: {nq}")

def run(m):
    with torch.no_grad():
        return m(input_ids=ids).logits.float(), m(input_ids=extra).logits.float()
def cos(p, q):
    p = p - p.mean(-1, keepdim=True); q = q - q.mean(-1, keepdim=True)
    return torch.nn.functional.cosine_similarity(p, q, dim=-1).mean().item()
def load_plain(d):
    return AutoModelForImageTextToText.from_pretrained(d, dtype=torch.bfloat16).eval()
ql, qx = run(model)
nan = bool(torch.isnan(ql).any() or torch.isinf(ql).any() or torch.isnan(qx).any() or torch.isinf(qx).any())
res(not nan, "no_nan", f"NaN/Inf in logits: {nan}")
k_ref = kl(ref["logits"], ql)
lp = torch.log_softmax(ref["logits"].float(), -1)
k_unif = (lp.exp() * (lp + torch.log(torch.tensor(float(lp.shape[-1]))))).sum(-1).mean().item()
line = (f"KL(bf16||q) over ref ids ({ids.shape[1]} tokens) mean/token={k_ref:.6f}, centered-logit cos={cos(ref['logits'], ql):.3f}"
        f" (a dead model, uniform logits, scores KL={k_unif:.6f})")
if a.bf16:
    bl, bx = run(load_plain(a.bf16))
    k_floor = kl(ref["logits"], bl)
    res(k_floor <= 1e-3, "bf16_reload_matches_ref", f"KL(ref_logits||bf16 reload)={k_floor:.2e} max_abs_diff={(bl - ref['logits']).abs().max().item():g} (threshold 1e-3)")
    print(f"  extra 64 seeded tokens: KL(bf16||q)={kl(bx, qx):.6f} cos={cos(bx, qx):.3f} (info only)")
res(k_ref <= a.kl_max and k_ref < k_unif and not nan, "logits_kl", f"{line}; threshold KL<={a.kl_max} and below the dead-model KL")
if a.peer:
    if a.linearized:
        model_cls.post_init = post_init
        try:
            pm = load_plain(a.peer)
        finally:
            model_cls.post_init = orig_post
    else:
        pm = load_plain(a.peer)
    pl, px = run(pm)
    d = max((pl - ql).abs().max().item(), (px - qx).abs().max().item())
    if a.peer_offset_norms:
        print(f"  llm-compressor output with its round-tripped norms: max |logits diff| = {d:g}, "
              f"KL(bf16||llmc)={kl(ref['logits'], pl):.6f} (info only)")
        ours = dict(model.named_parameters())
        with torch.no_grad():
            swapped = [n for n, p in pm.named_parameters() if "norm" in n and n in ours and p.dtype == ours[n].dtype
                       and not torch.equal(p, ours[n]) and p.copy_(ours[n]) is not None]
        pl, px = run(pm)
        d = max((pl - ql).abs().max().item(), (px - qx).abs().max().item())
        print(f"  {len(swapped)} norm tensors of the llm-compressor output set to fp4forge's (the source's)")
    res(d == 0.0, "logits_equal_llmc", f"max |logits(fp4forge) - logits(llm-compressor output)| = {d:g} over {ids.shape[1] + extra.shape[1]} tokens, KL(bf16||llmc)={kl(ref['logits'], pl):.6f}")
sys.exit(rc)

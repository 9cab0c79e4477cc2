"""Check (a): compressed-tensors' own NVFP4 compressor vs fp4forge, and CT's decompressor
vs fp4forge's dequantize.
usage: ct_match.py NAME SRC_BF16_DIR FF_Q_DIR [FF_DEQ_DIR]

For every module fp4forge quantized (its *.weight_packed names), the bf16 weight is taken
from the source checkpoint (fused MoE experts split exactly as llm-compressor's
ExpertMLPWithGate.copy_from_experts_module does: gate = gate_up_proj[e, :I],
up = gate_up_proj[e, I:], down = down_proj[e]). Then, using only the peers' code:
  stats   : llm-compressor's weight observer flattening + memoryless min/max
            (flatten_for_calibration, per-group amin/amax in bf16)
  global  : Observer.get_global_scale's union over the fusion group
            (llmcompressor.observers.helpers.FUSED_LAYER_NAMES) -> CT generate_gparam
  local   : CT calculate_qparams(min, max, NVFP4A16 preset args, global_scale),
            stored in a bf16 parameter as CT's initialize_qparams does
  pack    : CT NVFP4PackedCompressor.compress
and the bytes are compared with fp4forge's. Then CT NVFP4PackedCompressor.decompress of
fp4forge's own tensors is compared bit-exactly with FF_DEQ_DIR's <mod>.weight."""
import sys, os, glob, re
import torch
from safetensors.torch import load_file
from compressed_tensors.quantization import preset_name_to_scheme
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
from llmcompressor.observers.helpers import FUSED_LAYER_NAMES, flatten_for_calibration

name, src, ffq = sys.argv[1:4]
ffdeq = sys.argv[4] if len(sys.argv) > 4 else None
def load_dir(d):
    sd = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        sd.update(load_file(f))
    return sd
S, Q = load_dir(src), load_dir(ffq)
scheme = preset_name_to_scheme("NVFP4A16", ["Linear"])
args = scheme.weights
rc = 0
def res(ok, check, msg):
    global rc
    print(f"{'PASS' if ok else 'FAIL'} {name}_{check} {msg}", flush=True)
    rc |= (not ok)

mods = sorted(k[: -len(".weight_packed")] for k in Q if k.endswith(".weight_packed"))
exp_re = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)$")
# per-expert checkpoints whose experts fp4forge writes under linearized names
# (Mixtral's w1/w3/w2 written as gate_proj/up_proj/down_proj, as llm-compressor does)
RENAMED = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
def bf16_weight(m):
    if m + ".weight" in S:
        return S[m + ".weight"]
    parent, last = m.rsplit(".", 1)
    if last in RENAMED and f"{parent}.{RENAMED[last]}.weight" in S:
        return S[f"{parent}.{RENAMED[last]}.weight"]
    g = exp_re.match(m)
    assert g, f"no source weight for {m}"
    base, e, p = g.group(1), int(g.group(2)), g.group(3)
    if os.environ.get("CT_TRANSPOSED_EXPERTS") == "1":
        # Llama-4 stores [E, H, 2I] / [E, I, H]: copy_from_experts_module's is_transposed branch
        if p == "down_proj":
            return S[base + ".down_proj"][e].T
        gu = S[base + ".gate_up_proj"][e]
        inter = gu.shape[1] // 2
        return (gu[:, :inter] if p == "gate_proj" else gu[:, inter:]).T
    if p == "down_proj":
        return S[base + ".down_proj"][e]
    gu = S[base + ".gate_up_proj"][e]
    inter = gu.shape[0] // 2
    return gu[:inter] if p == "gate_proj" else gu[inter:]

# per-module observer statistics, as llm-compressor's memoryless_minmax weight observer
W, stats = {}, {}
for m in mods:
    w = bf16_weight(m).contiguous()
    W[m] = w
    obs = flatten_for_calibration(w, "weight", args)      # (1, out, in/16, 16)
    stats[m] = (torch.amin(obs, dim=(0, -1)), torch.amax(obs, dim=(0, -1)))

# fusion groups, as fuse_weight_observers: same parent, attribute names of one group
# (a member absent from the checkpoint is an attribute set to None, e.g. Gemma-4's
# v_proj on attention_k_eq_v layers, which fuse_weight_observers skips)
group_of = {m: [m] for m in mods}
mset = set(mods)
for m in mods:
    parent, attr = m.rsplit(".", 1)
    for fg in FUSED_LAYER_NAMES:
        if attr in fg:
            group_of[m] = [f"{parent}.{a}" for a in fg if f"{parent}.{a}" in mset]
ngroups = len({tuple(g) for g in group_of.values() if len(g) > 1})

def global_scale(m):
    # Observer.get_global_scale, verbatim in terms of the group's stats
    sts = [stats[x] for x in group_of[m]]
    absmax = sts[0][1].max()
    for mn, mx in sts:
        absmax = torch.max(absmax, -mn.min())
        absmax = torch.max(absmax, mx.max())
    return generate_gparam(-absmax.reshape(1), absmax.reshape(1))

tot = {"weight_packed": [0, 0, 0], "weight_scale": [0, 0, 0], "weight_global_scale": [0, 0, 0]}
shown = 0
ct_sd = {}
for m in mods:
    gs = global_scale(m)
    scale, _ = calculate_qparams(stats[m][0], stats[m][1], args, global_scale=gs)
    scale = scale.to(W[m].dtype)   # initialize_qparams makes weight_scale in the weight's dtype
    out = NVFP4PackedCompressor.compress(
        {"weight": W[m], "weight_scale": scale, "weight_global_scale": gs}, scheme)
    ct_sd[m] = out
    for k in tot:
        a = out[k].contiguous().view(torch.uint8).reshape(-1)
        b = Q[f"{m}.{k}"].contiguous().view(torch.uint8).reshape(-1)
        if a.shape != b.shape:
            print(f"  {m}.{k}: shape CT {list(out[k].shape)} fp4forge {list(Q[m + '.' + k].shape)}")
            tot[k][0] += b.numel(); tot[k][2] += 0
            continue
        eq = a == b
        tot[k][0] += a.numel(); tot[k][1] += int(eq.sum()); tot[k][2] += bool(eq.all())
        if not eq.all() and shown < 8:
            shown += 1
            i = torch.nonzero(~eq)[:4].reshape(-1).tolist()
            print(f"  differs: {m}.{k} {int((~eq).sum())}/{a.numel()} bytes, at {i}: CT {a[i].tolist()} fp4forge {b[i].tolist()}")
n = len(mods)
print(f"  {n} quantized modules, {ngroups} fused groups (shared global scale)")
for k, check in (("weight_packed", "ct_packed"), ("weight_scale", "ct_scale"), ("weight_global_scale", "ct_gscale")):
    t, s, ts = tot[k]
    res(n > 0 and s == t, check, f"match_fraction={s / max(t, 1):.6f} bytes {s}/{t}, identical tensors {ts}/{n}")

# decompressor on fp4forge's own output vs fp4forge dequantize
if not ffdeq:
    print(f"SKIP {name}_ct_decompress_vs_ff_dequantize (no fp4forge dequantize output given)")
    sys.exit(rc)
D = load_dir(ffdeq)
tsame = el = esame = 0
maxabs = 0.0
missing = []
shown = 0
for m in mods:
    if m + ".weight" not in D:
        missing.append(m); continue
    dec = NVFP4PackedCompressor.decompress(
        {"weight_packed": Q[m + ".weight_packed"], "weight_scale": Q[m + ".weight_scale"],
         "weight_global_scale": Q[m + ".weight_global_scale"]}, scheme)["weight"]
    ff = D[m + ".weight"]
    if dec.dtype != ff.dtype or dec.shape != ff.shape:
        print(f"  {m}: CT {dec.dtype}{list(dec.shape)} fp4forge {ff.dtype}{list(ff.shape)}")
        missing.append(m); continue
    eq = dec.view(torch.int16) == ff.view(torch.int16)
    el += eq.numel(); esame += int(eq.sum()); tsame += bool(eq.all())
    if not eq.all():
        d = (dec.float() - ff.float()).abs().max().item(); maxabs = max(maxabs, d)
        if shown < 6:
            shown += 1
            i = torch.nonzero(~eq.reshape(-1))[:3].reshape(-1).tolist()
            print(f"  differs: {m}.weight {int((~eq).sum())}/{eq.numel()} at {i}: CT {dec.reshape(-1)[i].tolist()} fp4forge {ff.reshape(-1)[i].tolist()}")
# the non-quantized tensors of the dequantized checkpoint must be the source's
qkeys = {m + ".weight" for m in mods}
odiff = [k for k in D if k not in qkeys and not (k in S and torch.equal(D[k].view(torch.uint8) if D[k].dtype != torch.uint8 else D[k], S[k].view(torch.uint8) if S[k].dtype != torch.uint8 else S[k]))]
for k in odiff[:5]: print(f"  dequantized checkpoint tensor {k} not equal to source")
res(not missing and esame == el, "ct_decompress_vs_ff_dequantize",
    f"bit-identical bf16 elements {esame}/{el} ({esame / max(el, 1):.6f}), tensors {tsame}/{n}, missing {len(missing)}, max_abs_diff={maxabs:g}")
ok_other = not odiff
res(ok_other, "ff_dequantize_other_tensors", f"{len(D) - len(qkeys & set(D)) - len(odiff)}/{len(D) - len(qkeys & set(D))} non-quantized tensors equal to source")
sys.exit(rc)

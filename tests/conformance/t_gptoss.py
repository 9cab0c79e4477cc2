"""Conformance for gpt-oss's own MXFP4 layout (quant_method "mxfp4", the openai/gpt-oss-*
uploads): per layer `mlp.experts.{gate_up,down}_proj_blocks` uint8 [E, R, K/32, 16] (E2M1
pairs, LOW nibble first) + `_scales` uint8 [E, R, K/32] (E8M0) + bf16 `_bias`, rows in
nn.Linear [out, in] order, gate/up INTERLEAVED on the 2I rows (gate = even, up = odd);
everything else bf16. The reference decode is transformers 5.17's own (integrations/
mxfp4.py `_convert_moe_packed_tensors`, run by from_pretrained(..., Mxfp4Config(
dequantize=True))); llm-compressor 0.14 linearizes gpt-oss's fused experts per expert
(modeling/moe/gpt_oss.py: gate = gate_up[:, 0::2].T, up = gate_up[:, 1::2].T).

1. make: a tiny random GptOssForCausalLM saved by transformers (bf16; biases, sinks and
   norms randomised, transformers initialises expert biases to zero and norms to one);
   `mx`: its fused experts replaced by random valid `_blocks` and `_scales` (E8M0
   116..131: 16 binades, which E4M3 powers of two hold, so the exact route can carry
   every weight), the bf16 biases kept, quantization_config {"quant_method": "mxfp4",
   "modules_to_not_convert": [...]} as gpt-oss-20b's; `mx-edge`: the same with one
   expert (layer 1, expert 2) given E8M0 0, 1 and 254 (254's groups hold codes
   |v| <= 1.5 only, 2 * 2^127 is past bf16's largest) and -0 codes.
2. reference: from_pretrained(Mxfp4Config(dequantize=True)), checked bit for bit against
   an independent decode (OCP MX: f32 product FP4 x 2^(s-127), one RNE to bf16), split per
   expert here (save_pretrained of that model writes literal `gate_up_proj$` keys and loses
   experts, a transformers bug, so it is never used): gate_proj.weight = param[e][:, 0::2].T
   ([I, H]), up = [:, 1::2].T, down = param[e].T ([H, I]); biases [0::2] / [1::2] / down.
   `<src>-ref-bf16`: the loaded model's state dict as is (transformers' own bf16 gpt-oss
   layout, fused experts), config without quantization_config: what llm-compressor and
   fp4forge quantize as "the dequantized model".
3. fp4forge's decode (quantize --ignore '.*' --allow-partial) == the per-expert reference,
   bitwise, names/dtypes/shapes equal, every other tensor the source's.
4. fp4forge --mxfp4-route reference (WORK/ff-q-ref, compared with llm-compressor by
   t_gptoss.sh through llmc_compare.py); fp4forge on the bf16 copy == that one pass.
5. the exact route (default): `fp4forge dequantize` of its output == the reference decode
   on every expert weight the --json summary does not report re-quantized (mx: all; mx-edge:
   the edge expert may be re-quantized); the reference route's relative error beside it.
6. hostile copies of mx (an E8M0 255 = MX NaN scale, which transformers decodes silently;
   scales one group short; gate_up bias one short; int16 blocks): fp4forge exits non-zero,
   names the tensor, leaves nothing at the destination.
Modes:
  t_gptoss.py FF WORK                      steps 1-5
  t_gptoss.py llmc MX_SRC BF16_COPY DST    llm-compressor 0.14 NVFP4A16 oneshot of the model
        loaded from MX_SRC with Mxfp4Config(dequantize=True) (oneshot refuses a model whose
        on-disk config says mxfp4: recorded, then config._name_or_path pointed at BF16_COPY),
        saved compressed to DST; the same recipe on BF16_COPY loaded from disk must give the
        same bytes (DST-disk)
  t_gptoss.py vllm Q_DIR [PEER_DIR]        (vLLM venv) vllm.LLM on Q_DIR must fail: vLLM 0.32's
        gpt_oss.py has no path for expert biases or weight_global_scale in a
        compressed-tensors checkpoint; PEER_DIR (llm-compressor's output) reported beside"""
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys

P = "gptoss"

# ---------------------------------------------------------------- vLLM (its own venv)
if len(sys.argv) > 2 and sys.argv[1] == "--vllm-child":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    import traceback
    try:
        from vllm import LLM, SamplingParams
        llm = LLM(model=sys.argv[2], dtype="bfloat16", enforce_eager=True, max_model_len=64, max_num_seqs=1,
                  skip_tokenizer_init=True)
        out = llm.generate([{"prompt_token_ids": [1, 5, 9, 33]}], SamplingParams(max_tokens=2, detokenize=False,
                                                                                 temperature=0))
        print(f"CHILD ran: tokens {list(out[0].outputs[0].token_ids)}", flush=True)
    except BaseException as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        where = [f"{os.path.basename(w.filename)}:{w.lineno}" for w in tb[-2:]]
        msg = " ".join(str(exc).split())[:300]
        print(f"CHILD {type(exc).__name__}: {msg} ({' <- '.join(reversed(where))})", flush=True)
    sys.exit(0)

if len(sys.argv) > 2 and sys.argv[1] == "vllm":
    def child(path):
        try:
            r = subprocess.run([sys.executable, __file__, "--vllm-child", path], capture_output=True, text=True,
                               timeout=900)
        except subprocess.TimeoutExpired:
            return "no report (timed out after 900 s)", ""
        ends = [ln[6:] for ln in r.stdout.splitlines() if ln.startswith("CHILD ")]
        return (ends[0] if ends else f"no report (exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]})"), r.stderr
    end, log = child(sys.argv[2])
    sys.stderr.write(log)   # the child's vLLM log, kept in t_gptoss.sh's vllm.err
    peer = ""
    if len(sys.argv) > 3 and os.path.isdir(sys.argv[3]):
        pend, plog = child(sys.argv[3])
        sys.stderr.write(plog)
        peer = f"; llm-compressor's own NVFP4A16 output: {pend}"
    # the plugin's line for the experts: vLLM built its compressed-tensors NVFP4A16 MoE
    # method (refused on CPU, answered by the plugin) before loading, so the failure is the
    # loader's name mapping, not the CPU build's missing NVFP4 kernels
    picked = [ln.split("]", 1)[-1].strip()[:160] for ln in log.splitlines()
              if "TEST plugin" in ln and "MoE" in ln]
    failed = not end.startswith("ran") and not end.startswith("no report")
    print(f"{'PASS' if failed else 'FAIL'} {P}_vllm_refuses (vLLM 0.32 CPU + the fp4forge test plugin on "
          f"{os.path.basename(sys.argv[2].rstrip('/'))}: "
          + (end if failed else f"expected a load failure, got: {end}")
          + (f"; vLLM log: {picked[0]}" if picked else "") + peer + ")", flush=True)
    sys.exit(0 if failed else 1)

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from conf_util import bits, desc, load_dir, peers_quiet, same_bits  # noqa: E402


def write_ckpt(dst, tensors, config, aux_from=None):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    save_file({k: v.contiguous() for k, v in tensors.items()}, dst + "/model.safetensors", metadata={"format": "pt"})
    json.dump(config, open(dst + "/config.json", "w"), indent=2)
    if aux_from:
        for f in os.listdir(aux_from):
            if f != "config.json" and not f.endswith(".safetensors") and not f.endswith(".index.json") \
                    and os.path.isfile(os.path.join(aux_from, f)):
                shutil.copy(os.path.join(aux_from, f), dst)


# ---------------------------------------------------------------- llm-compressor
if len(sys.argv) > 4 and sys.argv[1] == "llmc":
    mx_src, copy_dir, dst = sys.argv[2:5]
    rc = 0
    with peers_quiet():
        from transformers import AutoModelForCausalLM, GptOssForCausalLM, Mxfp4Config
        from llmcompressor import oneshot
        from llmcompressor.modifiers.quantization import QuantizationModifier

    def recipe():
        # NVFP4A16 on every Linear; the routers are GptOssTopKRouter (not nn.Linear, never a
        # target), named anyway as the brief's ignore list does
        return QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=["lm_head", "re:.*mlp.router$"])

    # (a) the model loaded dequantized from the MXFP4 source, in memory
    with peers_quiet():
        m = GptOssForCausalLM.from_pretrained(mx_src, dtype=torch.bfloat16,
                                              quantization_config=Mxfp4Config(dequantize=True))
    refusal = None
    try:
        with peers_quiet():
            oneshot(model=m, recipe=recipe())
    except ValueError as ex:
        refusal = " ".join(str(ex).split())
    ok = refusal is not None and "(mxfp4)" in refusal
    print(f"{'PASS' if ok else 'FAIL'} {P}_llmc_refuses_mxfp4_source (oneshot on the model loaded with "
          f"Mxfp4Config(dequantize=True): " + (f"ValueError: {refusal[:150]}...; worked around by pointing "
          "config._name_or_path at the bf16 copy (oneshot.validate_model reads the ON-DISK config)" if refusal else
          "no refusal: llm-compressor changed, look") + ")", flush=True)
    rc |= not ok
    if refusal is not None:
        m.config._name_or_path = copy_dir
        with peers_quiet():
            oneshot(model=m, recipe=recipe())
    with peers_quiet():
        shutil.rmtree(dst, ignore_errors=True)
        m.save_pretrained(dst, save_compressed=True)
    del m
    # (b) the same recipe on the bf16 copy (transformers' fused layout) loaded from disk
    with peers_quiet():
        m2 = AutoModelForCausalLM.from_pretrained(copy_dir, dtype=torch.bfloat16)
        oneshot(model=m2, recipe=recipe())
        shutil.rmtree(dst + "-disk", ignore_errors=True)
        m2.save_pretrained(dst + "-disk", save_compressed=True)
    a, b = load_dir(dst), load_dir(dst + "-disk")
    diff = [k for k in a if k not in b or not same_bits(a[k], b[k])] + [k for k in b if k not in a]
    qa = json.load(open(dst + "/config.json"))["quantization_config"]
    qb = json.load(open(dst + "-disk/config.json"))["quantization_config"]
    fused = [k for k in a if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj") or "$" in k]
    ex = "model.layers.0.mlp.experts.0.gate_proj."
    lay = ", ".join(f"{s} {desc(a[ex + s])}" for s in ("weight_packed", "weight_scale", "weight_global_scale", "bias")
                    if ex + s in a)
    ok = not diff and qa == qb and not fused
    print(f"{'PASS' if ok else 'FAIL'} {P}_llmc_memory_equals_disk (llm-compressor's output from the in-memory "
          f"dequantized model == from the bf16 copy on disk: {len(a)} tensors, differing {diff[:3]}, "
          f"quantization_config {'equal' if qa == qb else 'differs'}; fused/`$` keys left {fused[:2]}; "
          f"{ex}{{{lay}}}; ignore {qa.get('ignore')})", flush=True)
    rc |= not ok
    sys.exit(rc)

# ---------------------------------------------------------------- steps 1-5
FF, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
rc = 0


def verdict(ok, name, detail):
    global rc
    print(("PASS " if ok else "FAIL ") + P + "_" + name + " (" + detail + ")", flush=True)
    if not ok:
        rc = 1


def ff(*args, doctor=False):
    """fp4forge, never raising: (rc, stdout, stderr lines)"""
    extra = [] if doctor or args[0] != "quantize" else ["--no-doctor", "--quiet"]
    try:
        r = subprocess.run([FF, *args, *extra], capture_output=True, text=True)
    except OSError as ex:
        return 127, "", [f"cannot run {FF}: {ex}"]
    return r.returncode, r.stdout, [x for x in r.stderr.splitlines() if x.strip()]


def last(lines):
    return (lines[-1] if lines else "(no stderr)")[:240]


os.makedirs(WORK, exist_ok=True)
with peers_quiet():
    from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config

# 1. the tiny model: H = 128 (4 MX groups), I = 96 (3 MX groups per down row: a decoder
# assuming power-of-two group counts shows), head_dim 64 (vLLM's CPU attention takes it)
E, H, I, NL = 4, 128, 96, 2
cfg = GptOssConfig(num_hidden_layers=NL, num_local_experts=E, num_experts_per_tok=2, vocab_size=256, hidden_size=H,
                   intermediate_size=I, head_dim=64, num_attention_heads=2, num_key_value_heads=1, sliding_window=8,
                   max_position_embeddings=256, tie_word_embeddings=False)
torch.manual_seed(0)
model = GptOssForCausalLM(cfg).to(torch.bfloat16)
with torch.no_grad():
    for n, p in model.named_parameters():
        if n.endswith("bias") or n.endswith("sinks"):
            p.normal_(0, 0.5)
        elif "norm" in n:
            p.add_(torch.randn_like(p) * 0.1)
bf16_dir = WORK + "/bf16"
shutil.rmtree(bf16_dir, ignore_errors=True)
model.save_pretrained(bf16_dir)
del model
bf16 = load_dir(bf16_dir)
base_cfg = json.load(open(bf16_dir + "/config.json"))
print(f"PASS {P}_make (GptOssForCausalLM bf16, E={E} H={H} I={I} layers={NL}: {len(bf16)} tensors; "
      f"{', '.join(f'{k.split(chr(46), 4)[-1]} {desc(v)}' for k, v in bf16.items() if k.startswith('model.layers.0.mlp.experts.'))})",
      flush=True)

# the MXFP4 sources
QCFG = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"]}
EDGE_L, EDGE_E = 1, 2
g = torch.Generator().manual_seed(1)
src = {"mx": {}, "mx-edge": {}}
for k, v in bf16.items():
    if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
        R, K = (2 * I, H) if "gate_up" in k else (H, I)
        blocks = torch.randint(0, 256, (E, R, K // 32, 16), generator=g, dtype=torch.uint8)
        scales = torch.randint(116, 132, (E, R, K // 32), generator=g, dtype=torch.uint8)
        src["mx"][k + "_blocks"], src["mx"][k + "_scales"] = blocks, scales
        eb, es = blocks.clone(), scales.clone()
        if k == f"model.layers.{EDGE_L}.mlp.experts.gate_up_proj":
            x = EDGE_E
            es[x, 0, 0], es[x, 1, 0] = 0, 1        # gate row 0 / up row 0: 2^-127, 2^-126
            es[x, 2, 1], es[x, 3, 2] = 254, 254    # gate row 1 / up row 1: 2^127
            eb[x, 2, 1] &= 0xBB                    # codes 0..3, 8..11: |v| <= 1.5
            eb[x, 3, 2] &= 0xBB
            eb[x, 4, 0] = 0x88                     # -0 codes
        if k == f"model.layers.{EDGE_L}.mlp.experts.down_proj":
            x = EDGE_E
            es[x, 0, 0], es[x, 1, 1], es[x, 2, 2] = 0, 1, 254
            eb[x, 2, 2] &= 0xBB
            eb[x, 3, 1] = 0x88
        src["mx-edge"][k + "_blocks"], src["mx-edge"][k + "_scales"] = eb, es
    else:
        src["mx"][k] = src["mx-edge"][k] = v
for s in src:
    write_ckpt(f"{WORK}/{s}", src[s], {**base_cfg, "quantization_config": QCFG}, aux_from=bf16_dir)
ek = f"model.layers.{EDGE_L}.mlp.experts."
print(f"PASS {P}_make_mxfp4 (mx: {len(src['mx'])} tensors, gate_up_proj_blocks "
      f"{desc(src['mx']['model.layers.0.mlp.experts.gate_up_proj_blocks'])}, _scales "
      f"{desc(src['mx']['model.layers.0.mlp.experts.gate_up_proj_scales'])}, down_proj_blocks "
      f"{desc(src['mx']['model.layers.0.mlp.experts.down_proj_blocks'])}, E8M0 116..131; mx-edge: layer {EDGE_L} "
      f"expert {EDGE_E} E8M0 {sorted(set(src['mx-edge'][ek + 'gate_up_proj_scales'][EDGE_E].flatten().tolist()))[:3]}.."
      f"{max(src['mx-edge'][ek + 'gate_up_proj_scales'][EDGE_E].flatten().tolist())}; "
      f"quantization_config {json.dumps(QCFG, separators=(',', ':'))})", flush=True)

# 2. the reference decode
FP4 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


def mx_decode(blocks, scales):
    """OCP MX 1.0, written from the spec: element 2b of a 32-group = low nibble of byte b;
    value = E2M1 x 2^(scale - 127), exact in f32 (2^-127 is an f32 subnormal), one RNE to
    bf16. Rows [E, R, K] in nn.Linear orientation."""
    e, r, gg, _ = blocks.shape
    b = blocks.long()
    v = torch.empty(e, r, gg, 32, dtype=torch.float32)
    v[..., 0::2], v[..., 1::2] = FP4[b & 15], FP4[b >> 4]
    pw = torch.pow(torch.tensor(2.0, dtype=torch.float64), scales.double() - 127).float()
    return (v * pw[..., None]).reshape(e, r, gg * 32).to(torch.bfloat16)


ref, fused_ref = {}, {}
for s in src:
    with peers_quiet():
        m = GptOssForCausalLM.from_pretrained(f"{WORK}/{s}", dtype=torch.bfloat16,
                                              quantization_config=Mxfp4Config(dequantize=True))
    sd = {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    kind = type(m.model.layers[0].mlp.experts).__name__
    qleft = hasattr(m.config, "quantization_config")
    del m
    agree, nexp, bad_other = 0, 0, []
    for L in range(NL):
        for proj in ("gate_up_proj", "down_proj"):
            k = f"model.layers.{L}.mlp.experts.{proj}"
            nexp += 1
            want = mx_decode(src[s][k + "_blocks"], src[s][k + "_scales"]).transpose(1, 2).contiguous()
            agree += same_bits(sd[k], want)
    others = [k for k in sd if not (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"))]
    bad_other = [k for k in others if k not in src[s] or not same_bits(sd[k], src[s][k])]
    missing = [k for k in src[s] if not k.endswith("_blocks") and not k.endswith("_scales") and k not in sd]
    keys_plain = set(sd) == set(bf16)
    ok = agree == nexp and not bad_other and not missing and keys_plain
    verdict(ok, f"{s}_reference_routes_agree",
            f"from_pretrained(Mxfp4Config(dequantize=True)): {kind}, quantization_config left on the model "
            f"{qleft}; its gate_up_proj {desc(sd['model.layers.0.mlp.experts.gate_up_proj'])} / down_proj "
            f"{desc(sd['model.layers.0.mlp.experts.down_proj'])} bitwise equal to the OCP MX decode (f32 product, "
            f"one RNE) transposed: {agree}/{nexp}; other tensors equal to the source {len(others) - len(bad_other)}/"
            f"{len(others)} {bad_other[:2]}; state-dict keys == a plain bf16 save's {keys_plain}")
    # per-expert reference (llm-compressor's linearization, modeling/moe/gpt_oss.py)
    r = {k: v for k, v in src[s].items() if not k.endswith("_blocks") and not k.endswith("_scales")
         and not k.endswith("experts.gate_up_proj_bias") and not k.endswith("experts.down_proj_bias")}
    for L in range(NL):
        p = f"model.layers.{L}.mlp.experts."
        gu, gub = sd[p + "gate_up_proj"], sd[p + "gate_up_proj_bias"]
        dn, dnb = sd[p + "down_proj"], sd[p + "down_proj_bias"]
        for e in range(E):
            r[f"{p}{e}.gate_proj.weight"] = gu[e][:, 0::2].T.contiguous()
            r[f"{p}{e}.up_proj.weight"] = gu[e][:, 1::2].T.contiguous()
            r[f"{p}{e}.down_proj.weight"] = dn[e].T.contiguous()
            r[f"{p}{e}.gate_proj.bias"] = gub[e][0::2].contiguous()
            r[f"{p}{e}.up_proj.bias"] = gub[e][1::2].contiguous()
            r[f"{p}{e}.down_proj.bias"] = dnb[e].contiguous()
    ref[s], fused_ref[s] = r, sd
    write_ckpt(f"{WORK}/{s}-ref-bf16", sd, base_cfg, aux_from=bf16_dir)

EXPERT_W = sorted(k for k in ref["mx"] if ".mlp.experts." in k and k.endswith(".weight"))
print(f"PASS {P}_reference_copy ({WORK}/mx-ref-bf16: the dequantized model's state dict, fused experts, no "
      f"quantization_config; per-expert reference: {len(ref['mx'])} tensors, {len(EXPERT_W)} expert weights "
      f"(gate/up [{I}, {H}], down [{H}, {I}]) + their biases)", flush=True)


def is_edge(k):
    return k.startswith(f"model.layers.{EDGE_L}.mlp.experts.{EDGE_E}.")


# 3. fp4forge's decode == the reference
for s in src:
    dec_dir = f"{WORK}/ff-dec-{s}"
    shutil.rmtree(dec_dir, ignore_errors=True)
    st, _, err = ff("quantize", f"{WORK}/{s}", dec_dir, "--ignore", ".*", "--allow-partial")
    if st != 0:
        verdict(False, f"{s}_decode_equals_transformers", f"fp4forge exit {st}: {last(err)}")
        continue
    dec, r = load_dir(dec_dir), ref[s]
    bad = [k for k in r if k not in dec or not same_bits(dec[k], r[k])]
    extra = sorted(k for k in dec if k not in r)
    bad_w = [k for k in bad if k in EXPERT_W]
    bad_b = [k for k in bad if ".mlp.experts." in k and k.endswith(".bias")]
    bad_o = [k for k in bad if ".mlp.experts." not in k]
    meta = [f"{k}: ff {desc(dec[k])} ref {desc(r[k])}" for k in bad if k in dec and
            (dec[k].dtype != r[k].dtype or dec[k].shape != r[k].shape)]
    maxdiff = max([(dec[k].float() - r[k].float()).abs().max().item() for k in bad
                   if k in dec and dec[k].shape == r[k].shape and dec[k].is_floating_point()] or [0.0])
    # a bias swapped gate <-> up, or a weight de-interleaved as halves, named
    hints = []
    for k in bad_w + bad_b:
        if k not in dec or dec[k].shape != r[k].shape:
            continue
        other = k.replace("gate_proj", "up_proj") if "gate_proj" in k else k.replace("up_proj", "gate_proj")
        if other != k and same_bits(dec[k], r[other]):
            hints.append(f"{k.split('experts.')[1]} holds the {'up' if 'gate_proj' in k else 'gate'} rows")
    qc = json.load(open(dec_dir + "/config.json")).get("quantization_config")
    qc = (f"{qc.get('quant_method')}/{qc.get('format')}, ignore {len(qc.get('ignore') or [])} modules, "
          f"{sum(k.endswith('.weight_packed') for k in dec)} weight_packed tensors") if qc else None
    verdict(not bad and not extra, f"{s}_decode_equals_transformers",
            f"{len(EXPERT_W) - len(bad_w)}/{len(EXPERT_W)} expert weights and "
            f"{3 * E * NL - len(bad_b)}/{3 * E * NL} expert biases bitwise equal, other tensors "
            f"{len(r) - 6 * E * NL - len(bad_o)}/{len(r) - 6 * E * NL} equal to the source; max |diff| {maxdiff}; "
            f"mismatches {bad[:3]} {meta[:1]} {hints[:2]}; extra {extra[:3]}; decoded config.json "
            f"quantization_config {qc or 'absent'}")

# 4. the reference route (llm-compressor's bytes are the bar, t_gptoss.sh) and fp4forge
# on the dequantized copy
q_ref = f"{WORK}/ff-q-ref"
shutil.rmtree(q_ref, ignore_errors=True)
st1, _, e1 = ff("quantize", f"{WORK}/mx", q_ref, "--mxfp4-route", "reference")
if st1 != 0:
    verdict(False, "reference_route_quantize", f"fp4forge exit {st1}: {last(e1)}")
else:
    q_copy = f"{WORK}/ff-q-bf16copy"
    shutil.rmtree(q_copy, ignore_errors=True)
    st2, _, e2 = ff("quantize", f"{WORK}/mx-ref-bf16", q_copy)
    if st2 != 0:
        verdict(False, "one_pass_equals_reference_copy", f"fp4forge on transformers' bf16 gpt-oss copy (fused, "
                f"transposed experts): exit {st2}: {last(e2)}")
    else:
        a, b = load_dir(q_ref), load_dir(q_copy)
        diff = [k for k in a if k not in b or not same_bits(a[k], b[k])] + [k for k in b if k not in a]
        ia = json.load(open(q_ref + "/config.json"))["quantization_config"].get("ignore")
        ib = json.load(open(q_copy + "/config.json"))["quantization_config"].get("ignore")
        verdict(not diff and ia == ib, "one_pass_equals_reference_copy",
                f"--mxfp4-route reference on mx == fp4forge on mx-ref-bf16: {len(a)} tensors "
                f"({sum(k.endswith('weight_packed') for k in a)} quantized modules), differing {diff[:3]}, "
                f"ignore lists {'equal' if ia == ib else f'differ: {ia} vs {ib}'}")

# 5. the exact route (default)
for s in src:
    qx, qr = f"{WORK}/ff-q" + ("" if s == "mx" else "-edge"), f"{WORK}/ff-q-ref" + ("" if s == "mx" else "-edge")
    if s != "mx":
        shutil.rmtree(qr, ignore_errors=True)
        st, _, err = ff("quantize", f"{WORK}/{s}", qr, "--mxfp4-route", "reference")
        if st != 0:
            verdict(False, f"{s}_exact_route", f"fp4forge --mxfp4-route reference exit {st}: {last(err)}")
            continue
    elif st1 != 0:
        verdict(False, f"{s}_exact_route", "no reference-route output (above)")
        continue
    shutil.rmtree(qx, ignore_errors=True)
    st, out, err = ff("quantize", f"{WORK}/{s}", qx, "--json")
    if st != 0:
        verdict(False, f"{s}_exact_route", f"fp4forge quantize (default route) exit {st}: {last(err)}")
        continue
    try:
        summary = json.loads(out)
    except ValueError:
        summary = {}
    counts = summary.get("mxfp4", {}) if isinstance(summary, dict) else {}
    dq = {}
    for d in (qx, qr):
        shutil.rmtree(d + "-dq", ignore_errors=True)
        st, _, err = ff("dequantize", d, d + "-dq")
        if st != 0:
            break
        dq[d] = load_dir(d + "-dq")
    if len(dq) < 2:
        verdict(False, f"{s}_exact_route", f"fp4forge dequantize exit {st}: {last(err)}")
        continue
    a, b, r = dq[qx], dq[qr], ref[s]
    missing = [k for k in EXPERT_W if k not in a or k not in b]
    same = [k for k in EXPERT_W if k in a and same_bits(a[k], r[k])]
    differ = [k for k in EXPERT_W if k not in same]
    # in f64: the edge expert's values reach 1.5 * 2^127, whose squares overflow f32
    rel = {k: ((b[k].double() - r[k].double()).norm() / r[k].double().norm()).item() for k in EXPERT_W if k in b}
    rel_n = [x for x in rel.values() if x == x and abs(x) != float("inf")]
    rel_x = [((a[k].double() - r[k].double()).norm() / r[k].double().norm()).item() for k in differ if k in a]
    # both routes write the same tensors (names, dtypes, shapes); gate/up of an expert
    # share one global scale in each
    qa, qb = load_dir(qx), load_dir(qr)
    lay_bad = [k for k in set(qa) | set(qb) if k not in qa or k not in qb or qa[k].dtype != qb[k].dtype
               or qa[k].shape != qb[k].shape]
    gs_bad = [k for k in qa if k.endswith("gate_proj.weight_global_scale")
              and not same_bits(qa[k], qa.get(k.replace("gate_proj", "up_proj"), torch.empty(0)))]
    # a weight re-quantized on the exact route carries the reference route's bytes?
    requant_same = [k for k in differ if all(same_bits(qa[k[:-6] + x], qb[k[:-6] + x])
                                             for x in ("weight_packed", "weight_scale", "weight_global_scale")
                                             if k[:-6] + x in qa and k[:-6] + x in qb)]
    nreq = counts.get("requantized")
    if s == "mx":
        ok = not missing and len(same) == len(EXPERT_W) and nreq == 0
    else:
        # only the edge expert may differ, and then the summary must say it re-quantized something
        ok = (not missing and all(is_edge(k) for k in differ) and isinstance(nreq, int)
              and (nreq > 0) == bool(differ))
    ok = ok and not lay_bad and not gs_bad
    verdict(ok, f"{s}_exact_route",
            f"--json mxfp4 {json.dumps(counts, separators=(',', ':'))}; `fp4forge dequantize` of the default output "
            f"== transformers' decode on {len(same)}/{len(EXPERT_W)} expert weights"
            + (f", differing {[k.split('experts.')[1] for k in differ][:4]} (rel err {max(rel_x or [0]):.4f}; "
               f"{len(requant_same)}/{len(differ)} carry the reference route's bytes)" if differ else "")
            + f"; the reference route on the same weights: relative error mean "
            f"{sum(rel_n) / max(len(rel_n), 1):.4f}, max {max(rel_n or [0]):.4f}; both routes' tensors alike "
            f"{not lay_bad} {sorted(lay_bad)[:2]}; gate/up global scale shared {not gs_bad} {gs_bad[:2]}")

# 6. hostile sources, copies of mx with one thing broken: fp4forge must exit non-zero, name
# the tensor, and leave nothing at the destination (nor its OUT.partial-PID staging folder)
DN0 = "model.layers.0.mlp.experts.down_proj"


def h_e8m0_255(t):
    # E8M0 255 is the format's NaN (OCP MX 1.0); transformers' ldexp decodes it silently
    sc = t[DN0 + "_scales"].clone()
    sc[1, 2, 0] = 255
    t[DN0 + "_scales"] = sc


def h_scales_short(t):
    t[DN0 + "_scales"] = t[DN0 + "_scales"][:, :, :-1].contiguous()    # one group short


def h_bias_short(t):
    k = "model.layers.1.mlp.experts.gate_up_proj_bias"
    t[k] = t[k][:, :-1].contiguous()                                       # 2I - 1


def h_blocks_dtype(t):
    k = "model.layers.1.mlp.experts.gate_up_proj_blocks"
    t[k] = t[k].to(torch.int16)


HOSTILE = (("e8m0_255", h_e8m0_255, DN0 + "_scales"), ("scales_shape", h_scales_short, DN0 + "_scales"),
           ("bias_shape", h_bias_short, "gate_up_proj_bias"), ("blocks_dtype", h_blocks_dtype, "gate_up_proj_blocks"))
for name, f, needle in HOSTILE:
    t = dict(src["mx"])
    f(t)
    hd, ho = f"{WORK}/hostile-{name}", f"{WORK}/hostile-{name}-out"
    write_ckpt(hd, t, {**base_cfg, "quantization_config": QCFG}, aux_from=bf16_dir)
    shutil.rmtree(ho, ignore_errors=True)
    peer = ""
    if name == "e8m0_255":
        with peers_quiet():
            mm = GptOssForCausalLM.from_pretrained(hd, dtype=torch.bfloat16, quantization_config=Mxfp4Config(dequantize=True))
        row = mm.model.layers[0].mlp.experts.down_proj.detach()[1, 0:32, 2].float()
        del mm
        peer = (f"; transformers decodes that group silently to {sorted(set(row.tolist()), key=str)[:6]} "
                f"(ldexp by 2^128)")
    st, _, err = ff("quantize", hd, ho)
    left = [d for d in glob.glob(ho + "*")]
    named = any(needle.split(".")[-1] in ln for ln in err)
    verdict(st != 0 and named and not left, f"hostile_{name}_refused",
            f"exit {st}, names {needle.split('.')[-1]}: {named}, left at the destination {left[:2]}; "
            f"{last(err)}{peer}")
sys.exit(rc)

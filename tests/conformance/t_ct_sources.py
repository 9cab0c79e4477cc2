"""Conformance for vendor-quantized compressed-tensors sources: INT4 `pack-quantized`
(W4A16, group 32, symmetric, routed experts only: Kimi-K2.5's layout; its text model is
DeepSeek-V3) and MXFP4 `mxfp4-pack-quantized` (uint8 E2M1 pairs, uint8 E8M0 scale per 32).
The sources are written by the peers themselves (llm-compressor 0.14 / compressed-tensors
0.19), the reference decode is theirs, and fp4forge must reproduce it bit for bit.

1. make: a tiny random DeepseekV3ForCausalLM saved by transformers 5.17 (bf16).
2. int4: llm-compressor oneshot, data-free, config_groups {weights: int 4, symmetric,
   group 32} on the routed experts only, save_compressed. oneshot linearizes the fused
   3-D experts (its modeling/moe LinearExperts2D), so the save is per expert:
   `...mlp.experts.E.{gate,up,down}_proj.weight_packed|weight_scale|weight_shape`.
3. mxfp4: the same model, compressed-tensors' preset scheme MXFP4A16 (weights only) on
   every Linear but lm_head and the routers (`re:.*mlp.gate$`).
3b. edge sources (int4-edge, mxfp4-edge): one expert of each rewritten with every code
   and scales over the whole finite range, bf16 subnormals and E8M0 0 included; and
   int4-f32scale / int4-f16scale: INT4 scales in f32 / f16 with mantissa bits bf16 lacks.
   Steps 4 and 5 only (their magnitudes and scale dtypes are no peer's output).
4. reference bf16 per source, two routes through the peers' code:
   (a) what users run: AutoModelForCausalLM.from_pretrained(src, dtype=bf16,
       quantization_config=CompressedTensorsConfig(dequantize=True)); experts are
       decompressed per expert by transformers' DecompressExperts and fused to
       gate_up_proj [E, 2I, H] / down_proj [E, H, I], so they are split back;
   (b) the compressor class on the checkpoint's own tensors, module by module
       (PackedQuantizationCompressor / MXFP4PackedCompressor .decompress).
   Both must agree bit for bit; (a) is written as WORK/<fmt>-ref-bf16 (decoded
   modules as `<mod>.weight` bf16, every other tensor as the source has it).
5. fp4forge's decode (quantize --ignore '.*' --allow-partial: nothing quantized, the
   source-quantized weights written decoded, their aux tensors gone) == reference,
   every tensor, names/dtypes equal, bitwise.
6. fp4forge's one pass over the source == fp4forge on the reference copy, every tensor
   byte for byte and ignore lists equal; (t_ct_sources.sh) llm-compressor's NVFP4A16
   oneshot of the reference copy (`t_ct_sources.py llmc SRC DST`) vs that one pass
   through llmc_compare.py. An MXFP4 source goes --mxfp4-route reference here.
6b. MXFP4's exact route (the default): `fp4forge dequantize` of the output == the reference
   decode bit for bit on every weight reported exact (mxfp4-edge's rewritten expert spans
   more binades than E4M3 holds and is reported re-quantized); the reference route's
   relative error on the same weights printed beside it.
7. hostile sources, each a copy of a good one with one thing broken: fp4forge must exit
   non-zero, name the tensor (or config key), and leave nothing at the destination
   (not even its OUT.partial-PID staging folder).
Usage: t_ct_sources.py FF WORK | t_ct_sources.py llmc SRC DST
"""
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

if sys.argv[1] == "llmc":
    # the peer's NVFP4A16 of the reference copy; the ignore list of llm-compressor's
    # DeepSeek example, as t_deepseek_fp8.py's llmc mode
    import transformers
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.bfloat16)
    oneshot(model=m, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=["lm_head", "re:.*mlp.gate$"]))
    m.save_pretrained(sys.argv[3], save_compressed=True)
    sys.exit(0)

FF, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
P = "ct_sources"
rc = 0
FMTS = ("int4", "mxfp4")
AUX = ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point", "weight_global_scale")


def verdict(ok, name, detail):
    global rc
    print(("PASS " if ok else "FAIL ") + P + "_" + name + " (" + detail + ")", flush=True)
    if not ok:
        rc = 1


def ff(*args):
    """fp4forge, never raising: (rc, last stderr line). --no-doctor: the tiny checkpoints
    have no tokenizer, which doctor would report (exit 4) before the decoder is reached."""
    r = subprocess.run([FF, *args, "--no-doctor", "--quiet"], capture_output=True, text=True)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    return r.returncode, lines


def dequantize(q, out):
    r = subprocess.run([FF, "dequantize", q, out], capture_output=True, text=True)
    return r.returncode, [x for x in r.stderr.splitlines() if x.strip()]


def last(lines):
    return (lines[-1] if lines else "(no stderr)")[:240]


def copy_aux(src, dst):
    # tokenizer/generation files etc.: everything but weights and config
    for f in os.listdir(src):
        if f != "config.json" and not f.endswith(".safetensors") and not f.endswith(".safetensors.index.json") \
                and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)


def write_ckpt(dst, tensors, config):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    save_file({k: v.contiguous() for k, v in tensors.items()}, dst + "/model.safetensors", metadata={"format": "pt"})
    json.dump(config, open(dst + "/config.json", "w"), indent=2)


def modules_of(sd):
    """quantized module prefixes (`<mod>.`) of a compressed-tensors state dict"""
    return sorted(k[:-len("weight_packed")] for k in sd if k.endswith(".weight_packed"))


os.makedirs(WORK, exist_ok=True)
from transformers import AutoModelForCausalLM, CompressedTensorsConfig, DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: E402
from conf_util import bits, desc, load_dir, peers_quiet, same_bits  # noqa: E402

# 1. the tiny model: t_deepseek_fp8.py's config except moe_intermediate_size 96: three
# groups of 32 per down_proj row, so a decoder assuming power-of-two group counts (or
# in_features % 64, % 128) shows; every dim stays a multiple of 32 (MX and INT4 groups)
# and of 16 (NVFP4)
cfg = DeepseekV3Config(vocab_size=512, hidden_size=256, intermediate_size=256, moe_intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1,
                       n_routed_experts=4, routed_scaling_factor=2.5, kv_lora_rank=384, q_lora_rank=128,
                       qk_rope_head_dim=128, v_head_dim=64, qk_nope_head_dim=64, n_group=1, topk_group=1,
                       num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
                       max_position_embeddings=512, tie_word_embeddings=False, num_nextn_predict_layers=0,
                       topk_method="noaux_tc", scoring_func="sigmoid")
torch.manual_seed(0)
bf16_dir = WORK + "/bf16"
shutil.rmtree(bf16_dir, ignore_errors=True)
DeepseekV3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(bf16_dir)
bf16 = load_dir(bf16_dir)
print(f"PASS {P}_make (DeepseekV3ForCausalLM bf16, {len(bf16)} tensors, "
      f"{sum('.mlp.experts.' in k for k in bf16)} per-expert tensors as saved)", flush=True)

# 2./3. the vendor-quantized sources, written by the peers
with peers_quiet():  # llm-compressor logs to stdout from its import on
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

# Kimi-K2.5's experts group: int 4 symmetric group 32 (its config names the routed
# experts by regex; attention, shared experts, dense MLP and routers stay bf16 here)
EXPERTS_RE = r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"
RECIPES = {
    "int4": QuantizationModifier(config_groups={"group_0": {
        "targets": [EXPERTS_RE],
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32,
                    "dynamic": False}}}, ignore=["lm_head"]),
    "mxfp4": QuantizationModifier(targets="Linear", scheme="MXFP4A16", ignore=["lm_head", "re:.*mlp.gate$"]),
}
src, qcfg = {}, {}
for fmt in FMTS:
    d = f"{WORK}/{fmt}"
    shutil.rmtree(d, ignore_errors=True)
    try:
        with peers_quiet():
            m = AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.bfloat16)
            oneshot(model=m, recipe=RECIPES[fmt])
            m.save_pretrained(d, save_compressed=True)
        del m
    except Exception as ex:
        verdict(False, f"{fmt}_make", f"llm-compressor oneshot/save raised {type(ex).__name__}: {str(ex)[:200]}")
        continue
    src[fmt] = load_dir(d)
    qcfg[fmt] = json.load(open(d + "/config.json"))["quantization_config"]
    mods = modules_of(src[fmt])
    expert_mods = [mm for mm in mods if ".mlp.experts." in mm]
    ex = expert_mods[0] if expert_mods else (mods[0] if mods else "")
    shown = ", ".join(f"{a} {desc(src[fmt][ex + a])}" + (f"={src[fmt][ex + a].tolist()}" if a == "weight_shape" else "")
                      for a in AUX if ex + a in src[fmt])
    fused_left = [k for k in src[fmt] if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")]
    ok = bool(mods) and not fused_left and (fmt != "int4" or len(expert_mods) == len(mods))
    verdict(ok, f"{fmt}_make", f"{len(mods)} modules quantized ({len(expert_mods)} per-expert), fused 3-D experts left "
            f"{len(fused_left)}; {ex}: {shown}; quantization_config {json.dumps(qcfg[fmt], separators=(',', ':'))}")

# 3b. edge sources: llm-compressor's scales of a random model span a binade or two
# (E8M0 bytes 119..121 here), so one expert of each source is rewritten with every code
# and scales across the whole finite range, subnormal bf16 included (flush-to-zero, RNE
# in the subnormal range, E8M0 0 = 2^-127, MXFP4's -0 code): still the peers' format,
# decoded by the peers' code in step 4
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32  # noqa: E402

L = "model.layers.1.mlp.experts."
EDGE = L + "3.down_proj."            # in_features 96: three groups per row
if "int4" in src:
    t = dict(src["int4"])
    rows, cols = t[EDGE + "weight_shape"].tolist()
    codes = ((torch.arange(rows * cols).view(rows, cols) + 5 * torch.arange(rows)[:, None]) % 16 - 8).to(torch.int8)
    t[EDGE + "weight_packed"] = pack_to_int32(codes, 4)
    g = torch.Generator().manual_seed(1)
    # positive bf16 bit patterns, exponent field 0 (subnormal) .. 247: |code| <= 8 keeps
    # every product finite; zero (0x0000) is left out, a zero scale is not what a writer emits
    sb = (torch.randint(0, 248, (rows, cols // 32), generator=g) << 7) | torch.randint(0, 128, (rows, cols // 32), generator=g)
    sb[0] = torch.tensor([1, 64, 127])                 # the smallest subnormals
    sb[1] = torch.tensor([247 << 7 | 127, 128, 127 << 7])  # the largest allowed, 2^-126, 1.0
    sb[sb == 0] = 1
    t[EDGE + "weight_scale"] = sb.to(torch.int16).view(torch.bfloat16)
    src["int4-edge"], qcfg["int4-edge"] = t, qcfg["int4"]
if "mxfp4" in src:
    t = dict(src["mxfp4"])
    rows, half = t[EDGE + "weight_packed"].shape
    t[EDGE + "weight_packed"] = ((torch.arange(rows * half).view(rows, half) + 7 * torch.arange(rows)[:, None]) % 256).to(torch.uint8)
    # E8M0 0..252: 6 * 2^(252-127) is bf16-finite, 253 and 254 would overflow with the largest codes
    t[EDGE + "weight_scale"] = (torch.arange(rows * (2 * half // 32)).view(rows, -1) % 253).to(torch.uint8)
    src["mxfp4-edge"], qcfg["mxfp4-edge"] = t, qcfg["mxfp4"]
if "int4" in src:
    # fp4forge takes INT4 scales in bf16, f16 or f32; compressed-tensors then multiplies in
    # the scale's dtype (forward_helpers._dequantize: x_q.to(scale.dtype) * scale) and the
    # model casts to bf16: two roundings. Every expert's scale gets random low mantissa
    # bits below bf16's, so that product is inexact in f32 / f16 and the order shows.
    g = torch.Generator().manual_seed(2)
    for name, dt, ib, nbits in (("int4-f32scale", torch.float32, torch.int32, 16), ("int4-f16scale", torch.float16, torch.int16, 3)):
        t = dict(src["int4"])
        for k in [k for k in t if k.endswith(".weight_scale")]:
            v = t[k].to(dt).view(ib)
            t[k] = (v | torch.randint(0, 1 << nbits, v.shape, generator=g).to(ib)).view(dt)
        src[name], qcfg[name] = t, qcfg["int4"]
    # In f16 the two roundings differ often (~2% of elements here); in f32 (4-bit code x
    # 24-bit scale) only where f32 rounds 3*s onto a bf16 midpoint, which random scales
    # almost never do. So EDGE's scales in int4-f32scale are searched for that: a decoder
    # rounding the exact product once to bf16 then differs on every code +-3.
    def bf16_once(x):  # RNE of a double straight to bf16 (normal range)
        b = x.view(torch.int64)
        b = (b + ((1 << 44) - 1) + ((b >> 45) & 1)) & ~((1 << 45) - 1)
        return b.view(torch.float64).to(torch.float32).to(torch.bfloat16)
    cand = (torch.randint(0x3B800000, 0x3C400000, (1 << 23,), generator=g, dtype=torch.int32)).view(torch.float32)
    p = 3.0 * cand.double()
    hit = cand[p.float().to(torch.bfloat16).view(torch.int16) != bf16_once(p).view(torch.int16)]
    sh = src["int4-f32scale"][EDGE + "weight_scale"].shape
    src["int4-f32scale"][EDGE + "weight_scale"] = hit[torch.arange(sh.numel()) % hit.numel()].view(sh)
for e in [k for k in src if k not in FMTS]:
    base = e.split("-")[0]
    c = json.load(open(f"{WORK}/{base}/config.json"))
    write_ckpt(f"{WORK}/{e}", src[e], c)
    copy_aux(f"{WORK}/{base}", f"{WORK}/{e}")
    sc = src[e][EDGE + "weight_scale"]
    print(f"PASS {P}_{e}_make ({EDGE}" + ("weight_packed rewritten with every code, " if e.endswith("-edge") else "") +
          f"weight_scale {desc(sc)} spanning "
          f"{sc.float().min().item():.3g}..{sc.float().max().item():.3g}{' (E8M0 bytes)' if sc.dtype == torch.uint8 else ''})",
          flush=True)

# 4. the reference decode, two routes (every source, edge ones included)
from compressed_tensors.compressors import MXFP4PackedCompressor, PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402

COMPRESSOR = {"pack-quantized": PackedQuantizationCompressor, "mxfp4-pack-quantized": MXFP4PackedCompressor}
I = cfg.moe_intermediate_size
ref = {}
for fmt in list(src):
    s = src[fmt]
    mods = modules_of(s)
    qc = QuantizationConfig.model_validate(qcfg[fmt])
    scheme = next(iter(qc.config_groups.values()))
    comp = COMPRESSOR[qcfg[fmt]["format"]]

    # (b) the compressor class on each module's own tensors (local names, as
    # BaseCompressor.decompress_module hands them over)
    direct = {}
    for mm in mods:
        local = {a: s[mm + a] for a in AUX if mm + a in s}
        # it decodes in the scale's dtype (bf16 for llm-compressor's INT4 and for MXFP4)
        direct[mm + "weight"] = comp.decompress(local, scheme)["weight"]

    # (a) the whole-model load users do
    loaded, note = {}, ""
    try:
        with peers_quiet():
            model = AutoModelForCausalLM.from_pretrained(f"{WORK}/{fmt}", dtype=torch.bfloat16,
                                                         quantization_config=CompressedTensorsConfig(dequantize=True))
        sd = model.state_dict()
        fused = 0
        for mm in mods:
            k = mm + "weight"
            if ".mlp.experts." in k:
                pre, rest = k.split(".mlp.experts.")
                e, proj = int(rest.split(".")[0]), rest.split(".")[1]
                if pre + ".mlp.experts.down_proj" in sd:
                    fused += 1
                    if proj == "down_proj":
                        loaded[k] = sd[pre + ".mlp.experts.down_proj"][e]
                    else:
                        gu = sd[pre + ".mlp.experts.gate_up_proj"][e]
                        loaded[k] = gu[:I] if proj == "gate_proj" else gu[I:]
                    continue
            loaded[k] = sd[k]
        note = (f"from_pretrained(CompressedTensorsConfig(dequantize=True)): {fused} expert weights came back fused "
                f"(gate_up_proj/down_proj), split per expert; model dtype {next(model.parameters()).dtype}")
        del model, sd
    except Exception as ex:
        note = f"from_pretrained(dequantize=True) raised {type(ex).__name__}: {str(ex)[:160]}"
    agree = [k for k in direct if k in loaded and same_bits(direct[k], loaded[k].contiguous())]
    dt = sorted({str(v.dtype).replace("torch.", "") for v in direct.values()})
    dl = sorted({str(v.dtype).replace("torch.", "") for v in loaded.values()})
    ok = bool(loaded) and len(agree) == len(direct)
    differ = [k for k in direct if k not in agree][:2]
    verdict(ok, f"{fmt}_reference_routes_agree", f"{note}, decoded weights held as {dl}; compressor.decompress per "
            f"module: {len(direct)} weights, dtype {dt}; bitwise equal {len(agree)}/{len(direct)} {differ}")

    # the reference copy: route (a) where it ran (what users get), else (b), in bf16 (RNE;
    # a no-op but for f32/f16 scales, whose decode transformers leaves in that dtype even
    # under dtype=bf16); every non-decoded tensor as the source has it (its own dtype),
    # aux tensors gone; config.json the source's without quantization_config
    chosen = {k: v.to(torch.bfloat16) for k, v in (loaded if ok else direct).items()}
    r = {k: v for k, v in s.items() if not any(k.endswith("." + a) for a in AUX)}
    r.update({k: v.contiguous() for k, v in chosen.items()})
    ref[fmt] = r
    c = json.load(open(f"{WORK}/{fmt}/config.json"))
    c.pop("quantization_config", None)
    rd = f"{WORK}/{fmt}-ref-bf16"
    write_ckpt(rd, r, c)
    copy_aux(f"{WORK}/{fmt}", rd)
    nq = [k for k in r if k not in bf16 or not same_bits(r[k], bf16[k])]
    up = sorted({f"{k.split('.')[-1]} {desc(bf16[k])}->{desc(s[k])}" for k in s if k in bf16 and s[k].dtype != bf16[k].dtype})
    print(f"PASS {P}_{fmt}_reference_copy ({rd}: {len(r)} tensors, {len(chosen)} decoded weights from route "
          f"{'(a)' if ok else '(b)'}; {len(nq)} tensors differ from the bf16 original (the decoded ones); "
          f"dtypes the peer changed on save: {up or 'none'})", flush=True)

# 5. fp4forge's decode == the reference, bit for bit
for fmt in ref:
    dec_dir = f"{WORK}/ff-dec-{fmt}"
    shutil.rmtree(dec_dir, ignore_errors=True)
    st, err = ff("quantize", f"{WORK}/{fmt}", dec_dir, "--ignore", ".*", "--allow-partial")
    if st != 0:
        verdict(False, f"{fmt}_decode_equals_ct", f"fp4forge exit {st}: {last(err)}")
        continue
    dec, r = load_dir(dec_dir), ref[fmt]
    n_dec = sum(1 for mm in modules_of(src[fmt]) if mm + "weight" in dec)
    bad = [k for k in r if k not in dec or not same_bits(dec[k], r[k])]
    extra = [k for k in dec if k not in r]
    maxdiff = max([(dec[k].float() - r[k].float()).abs().max().item() for k in r
                   if k in dec and dec[k].shape == r[k].shape and dec[k].is_floating_point()] or [0.0])
    meta = [f"{k}: ff {desc(dec[k])} ref {desc(r[k])}" for k in bad if k in dec and
            (dec[k].dtype != r[k].dtype or dec[k].shape != r[k].shape)]
    verdict(not bad and not extra, f"{fmt}_decode_equals_ct",
            f"{n_dec} decoded weights, {len(r)} tensors, max |diff| {maxdiff}, mismatches {len(bad)} {bad[:2]} {meta[:1]}, "
            f"extra {extra[:3]}")

# 6. one pass over the source == fp4forge on the reference copy (the peers' own sources;
# the edge ones prove the decode, which step 5 did)
for fmt in [f for f in FMTS if f in ref]:
    q1, q2 = f"{WORK}/ff-q-{fmt}", f"{WORK}/ff-q-{fmt}-ref"
    for d in (q1, q2):
        shutil.rmtree(d, ignore_errors=True)
    # an MXFP4 source's default is the exact route (step 6b); the reference route is
    # what quantizing the dequantized copy gives, and what llm-compressor is compared with
    route = ["--mxfp4-route", "reference"] if fmt.startswith("mxfp4") else []
    st1, e1 = ff("quantize", f"{WORK}/{fmt}", q1, *route)
    st2, e2 = ff("quantize", f"{WORK}/{fmt}-ref-bf16", q2)
    if st1 or st2:
        verdict(False, f"{fmt}_one_pass_equals_reference_copy",
                f"fp4forge exit {st1} on the source ({last(e1) if st1 else 'ok'}), {st2} on the reference copy "
                f"({last(e2) if st2 else 'ok'})")
        continue
    a, b = load_dir(q1), load_dir(q2)
    diff = [k for k in a if k not in b or not same_bits(a[k], b[k])] + [k for k in b if k not in a]
    ia = json.load(open(q1 + "/config.json"))["quantization_config"].get("ignore")
    ib = json.load(open(q2 + "/config.json"))["quantization_config"].get("ignore")
    packed = sum(k.endswith("weight_packed") for k in a)
    verdict(not diff and ia == ib, f"{fmt}_one_pass_equals_reference_copy",
            f"{len(a)} tensors ({packed} quantized modules) byte-identical, ignore lists equal ({len(ia or [])}); "
            f"differing {diff[:3]}")

# 6b. the exact route (MXFP4, the default): codes copied, each 16-group's E4M3 scale
# 2^(e - 127 + k) under a global scale 2^k, so `fp4forge dequantize` of the output equals
# compressed-tensors' decode of the source bit for bit on every weight reported exact; the
# reference route's error on the same weights beside it.
for fmt in [f for f in ("mxfp4", "mxfp4-edge") if f in ref]:
    qx, dqx, dqr = f"{WORK}/ff-qx-{fmt}", f"{WORK}/ff-qx-{fmt}-dq", f"{WORK}/ff-q-{fmt}-dq"
    for d in (qx, dqx, dqr):
        shutil.rmtree(d, ignore_errors=True)
    st1, e1 = ff("quantize", f"{WORK}/{fmt}", qx, "--json")
    st2, e2 = dequantize(qx, dqx) if st1 == 0 else (1, "")
    st3, e3 = ff("quantize", f"{WORK}/{fmt}", f"{WORK}/ff-qr-{fmt}", "--mxfp4-route", "reference", "--force")
    st4, e4 = dequantize(f"{WORK}/ff-qr-{fmt}", dqr) if st3 == 0 else (1, "")
    if st1 or st2 or st3 or st4:
        verdict(False, f"{fmt}_exact_route", f"fp4forge exits {st1}/{st2}/{st3}/{st4}: {last(e1 or e2 or e3 or e4)}")
        continue
    counts = json.loads(subprocess.run([FF, "quantize", f"{WORK}/{fmt}", qx + "-again", "--json", "--no-doctor"],
                                       capture_output=True, text=True).stdout or "{}").get("mxfp4", {})
    shutil.rmtree(qx + "-again", ignore_errors=True)
    a, b, r = load_dir(dqx), load_dir(dqr), ref[fmt]
    mods = [m for m in modules_of(src[fmt]) if m + "weight" in r]
    same = [m for m in mods if same_bits(a[m + "weight"], r[m + "weight"])]
    rel = [((b[m + "weight"].float() - r[m + "weight"].float()).norm() / r[m + "weight"].float().norm()).item()
           for m in mods]
    rel = [x for x in rel if x == x and x != float("inf")]   # the edge expert's Inf/NaN aside
    # mxfp4-edge's rewritten expert spans E8M0 0..252, more than E4M3's 17 binades: that one
    # alone takes the reference route
    exact, fallback = counts.get("exact", -1), 1 if fmt.endswith("edge") else 0
    verdict(len(same) == len(mods) - fallback and exact >= 0 and counts.get("requantized") == fallback,
            f"{fmt}_exact_route",
            f"{exact} weights reported exact ({counts.get('exact_groups')} groups), {counts.get('requantized')} "
            f"re-quantized; dequantized output == compressed-tensors' decode of the source on {len(same)}/{len(mods)}; "
            f"the reference route on the same weights: relative error mean {sum(rel) / max(len(rel), 1):.4f}, "
            f"max {max(rel or [0]):.4f}")

# 7. hostile sources, each a copy of a peer's source with one thing broken. The broken
# module is a routed expert of layer 1 (experts are quantized in both formats); the
# projection differs per case so a check tied to one name shows.


def t_scale_shape(mod):
    def f(t):
        s = t[mod + "weight_scale"]
        t[mod + "weight_scale"] = s[:, :-1]      # one group short: in_features/32 - 1 columns
    return f


def t_scale_dtype(mod, dtype):
    def f(t):
        t[mod + "weight_scale"] = t[mod + "weight_scale"].to(dtype)
    return f


def t_nan_scale(mod):
    def f(t):
        s = t[mod + "weight_scale"].clone()
        s[3, 1] = float("nan")
        t[mod + "weight_scale"] = s
    return f


def t_e8m0_255(mod):
    # E8M0 255 is the format's NaN (OCP MX 1.0); compressed-tensors would decode 2^128 = inf
    def f(t):
        s = t[mod + "weight_scale"].clone()
        s[2, 0] = 255
        t[mod + "weight_scale"] = s
    return f


def t_asym(t):
    # an asymmetric checkpoint as compressed-tensors writes one: zero points int4,
    # packed along the output dim (pack_to_int32(..., packed_dim=0)), per group
    for k in [k for k in t if k.endswith(".weight_scale")]:
        zp = torch.zeros(t[k].shape, dtype=torch.int8)
        zp[0, 0] = 1
        t[k[:-len("weight_scale")] + "weight_zero_point"] = pack_to_int32(zp, 4, packed_dim=0)


def t_weight_shape(mod):
    def f(t):
        ws = t[mod + "weight_shape"].clone()
        ws[1] += 32                              # one more group than weight_packed holds
        t[mod + "weight_shape"] = ws
    return f


def c_weights(**kv):
    def f(c):
        for g in c["quantization_config"]["config_groups"].values():
            g["weights"].update(kv)
    return f


def ct_says(t, c, mod):
    """what the peer's own decoder makes of the broken module: the reason to refuse is
    sometimes that compressed-tensors decodes garbage without a word (NaN/inf weights,
    a shape it silently truncates) rather than that it raises"""
    try:
        qc = QuantizationConfig.model_validate(c["quantization_config"])
        scheme = next(iter(qc.config_groups.values()))
        wt = COMPRESSOR[qc.format].decompress({a: t[mod + a] for a in AUX if mod + a in t}, scheme)["weight"]
        nf = int((~torch.isfinite(wt.float())).sum())
        return f"compressed-tensors decodes it silently to {desc(wt)}, {nf} non-finite"
    except Exception as ex:
        return f"compressed-tensors raises {type(ex).__name__}: {str(ex).splitlines()[0][:90] if str(ex) else ''}"


E0 = L + "0.gate_proj."   # the module a config-wide break is probed on
# (name, format, module, tensor edit, config edit, what stderr must name: any of)
CASES = [
    # packed and scale disagree: either may be the one named (neither is known to be the wrong one)
    ("int4_scale_shape", "int4", L + "0.gate_proj.", t_scale_shape(L + "0.gate_proj."), None,
     ["weight_scale", "weight_packed"]),
    # INT4 scales are the weight's float dtype (bf16 here, scale_dtype null); int32 is no float
    ("int4_scale_dtype", "int4", L + "1.up_proj.", t_scale_dtype(L + "1.up_proj.", torch.int32), None, ["weight_scale"]),
    ("int4_nan_scale", "int4", L + "2.down_proj.", t_nan_scale(L + "2.down_proj."), None, ["weight_scale"]),
    # valid compressed-tensors (asymmetric group quantization), but not the format fp4forge decodes
    ("int4_asymmetric", "int4", E0, t_asym, c_weights(symmetric=False), ["symmetric", "weight_zero_point"]),
    # the scales' width contradicts the config: the key or any module's packed/scale
    # tensor (a leading "." means any module) both tell
    ("int4_group_size_64", "int4", E0, None, c_weights(group_size=64), ["group_size", ".weight_scale", ".weight_packed"]),
    ("int4_num_bits_8", "int4", E0, None, c_weights(num_bits=8), ["num_bits"]),
    ("int4_weight_shape", "int4", L + "3.gate_proj.", t_weight_shape(L + "3.gate_proj."), None,
     ["weight_shape", "weight_packed"]),
    ("mxfp4_scale_shape", "mxfp4", L + "0.down_proj.", t_scale_shape(L + "0.down_proj."), None,
     ["weight_scale", "weight_packed"]),
    # E8M0 must be uint8; bf16 scales are what an NVFP4-minded writer might put there
    ("mxfp4_scale_dtype", "mxfp4", L + "1.gate_proj.", t_scale_dtype(L + "1.gate_proj.", torch.bfloat16), None,
     ["weight_scale"]),
    ("mxfp4_e8m0_255", "mxfp4", L + "2.up_proj.", t_e8m0_255(L + "2.up_proj."), None, ["weight_scale"]),
    ("mxfp4_group_size_64", "mxfp4", E0, None, c_weights(group_size=64), ["group_size", ".weight_scale", ".weight_packed"]),
    ("mxfp4_num_bits_8", "mxfp4", E0, None, c_weights(num_bits=8), ["num_bits"]),
]
for i, (name, fmt, mod, tedit, cedit, want) in enumerate(CASES):
    if fmt not in src:
        continue
    # neutral folder names: a path echoed in the message must not supply the word
    # being looked for ("hostile-int4_asymmetric" contains "symmetric")
    bad_dir, out = f"{WORK}/hostile-{i:02d}", f"{WORK}/hostile-{i:02d}-out"
    t = dict(src[fmt])
    c = json.load(open(f"{WORK}/{fmt}/config.json"))
    if tedit:
        tedit(t)
    if cedit:
        cedit(c)
    write_ckpt(bad_dir, t, c)
    copy_aux(f"{WORK}/{fmt}", bad_dir)
    for d in [out] + glob.glob(out + ".partial*"):
        shutil.rmtree(d, ignore_errors=True)
    st, err = ff("quantize", bad_dir, out)
    left = [d for d in [out] + glob.glob(out + ".partial*") if os.path.exists(d)]
    # a module's tensor is named in full (`<mod>.weight_scale`), a config key as itself
    full = [mod + n if n.startswith("weight_") else n for n in want]
    named = [x for x in err if any(n in x.replace(bad_dir, "SRC").replace(out, "OUT") for n in full)]
    verdict(st != 0 and not left and bool(named), f"hostile_{name}",
            f"{os.path.basename(bad_dir)}: exit {st}, {len(err)} stderr line(s), "
            f"{'names' if named else 'does NOT name'} {' or '.join(full)}; left behind "
            f"{[os.path.basename(d) for d in left]}; {ct_says(t, c, mod)}; fp4forge: {(named[0] if named else last(err))[:200]}")
sys.exit(rc)

"""Conformance for Kimi-K3 (kimi_k3, issue 39 item 2), with llm-compressor's own Kimi-K3
modeling code (llmcompressor.modeling.kimi_k3, Moonshot's remote code as llm-compressor
0.14 ships it) as the oracle, on CPU.

What runs here and what cannot: a KDA layer needs `fla` (flash-linear-attention: its
ShortConvolution, FusedRMSNormGated and Triton chunk_kda), which is not installed, so
KimiDeltaAttention cannot even be built (modeling_kimi_linear.py:78-88 sets them to None);
the tiny model is all-MLA (linear_attn_config.kda_layers []), which builds and runs.

1. make: a tiny KimiK3ForConditionalGeneration (3 layers, all MLA with the output gate
   g_proj; layer 0 dense, 1-2 latent MoE of 4 experts + 2 shared; attention residuals;
   a 1-block MoonViT-3D tower and the patchmergerv2 projector), bf16, every weight drawn
   with its own standard deviation (llm-compressor's model leaves e_score_correction_bias
   uninitialised, and kaiming's bound makes every Linear of one input width share its
   amax, which would hide a global scale tied or not), saved by save_pretrained.
   AutoConfig gets the kimi_k3 config class registered, as trust_remote_code does for
   the hub upload (llm-compressor's load_context reads the config through AutoConfig).
2. fp4forge plan of it: the counts the config implies.
3. fp4forge quantize: the default plan (ff-q) and the example's recipe (ff-q-experts:
   --only the routed experts, --allow-partial).
4. MXFP4 source: llm-compressor's MXFP4A16 oneshot on the routed experts only (Moonshot's
   upload quantizes those, not the shared ones), its quantization_config moved into
   text_config where Moonshot ships it. Reference bf16 copy: compressed-tensors'
   MXFP4PackedCompressor.decompress per module (and, where it loads, the whole model
   through from_pretrained(CompressedTensorsConfig(dequantize=True)); both must agree).
   (a) fp4forge's decode (--ignore '.*' --allow-partial) == the copy, bit for bit;
   (b) fp4forge's one pass with --mxfp4-route reference == fp4forge on the copy, byte for
   byte; (c) the default exact route: `fp4forge dequantize` of its output gives the
   copy's expert weights bit for bit.
llmc mode (t_kimi_k3.sh runs it per recipe; each a fresh process):
   example      llm-compressor's K3 example recipe (examples/quantizing_moe/
                kimi_k3_example.py: targets re:.*block_sparse_moe.*, ignore the router,
                shared_experts, routed_expert) with NVFP4A16 instead of NVFP4
   full         targets Linear, NVFP4A16; ignore the example's router and routed_expert
                entries, patch_kimi_k3_ignore's three *_res_proj, lm_head, the vision
                tower and the projector (shared experts quantized, as vLLM builds them
                with the quant config)
   full-gfused  `full` with llm-compressor's FUSED_LAYER_NAMES group (q_a_proj,
                kv_a_proj_with_mqa) widened by g_proj, the third shard of vLLM's
                fused_qkv_a_g_proj
explain mode: fp4forge's default output against `full` differs only in the MLA q_a /
   kv_a / g global scales (llm-compressor leaves g_proj's own: theirs), and what vLLM
   would serve from that (it keeps the largest of a fused layer's global scales).
hfload mode: transformers + compressed-tensors load fp4forge's output and run it; its
   logits equal llm-compressor's (full-gfused) output's.
targets mode: the example's output differs from fp4forge's --only in config_groups'
   targets text alone (its regex, fp4forge's "Linear"): checked to select the same modules,
   then replaced in a copy so llmc_compare.py compares the rest.
Usage: t_kimi_k3.py FF WORK | t_kimi_k3.py llmc SRC DST RECIPE | t_kimi_k3.py explain FF LLMC LLMC_GFUSED |
       t_kimi_k3.py targets FF LLMC OUT | t_kimi_k3.py hfload BF16 FF LLMC
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
from conf_util import bits, load_dir, peers_quiet, same_bits  # noqa: E402

P = "k3"
rc = 0


def verdict(ok, name, detail):
    global rc
    print(("PASS " if ok else "FAIL ") + P + "_" + name + " (" + detail + ")", flush=True)
    if not ok:
        rc = 1


def kimi_classes():
    with peers_quiet():
        from transformers import AutoConfig
        from llmcompressor.modeling.kimi_k3 import KimiK3ForConditionalGeneration
        from llmcompressor.modeling.kimi_k3.configuration_kimi_k3 import KimiK3Config
        try:
            AutoConfig.register("kimi_k3", KimiK3Config)
        except ValueError:
            pass   # registered already
    return KimiK3ForConditionalGeneration, KimiK3Config


def load_model(src, **kw):
    """as llm-compressor's K3 example loads it (load_context), bf16"""
    cls, _ = kimi_classes()
    from llmcompressor.utils import load_context
    with peers_quiet(), load_context(cls):
        return cls.from_pretrained(src, dtype=torch.bfloat16, **kw)


EXAMPLE_IGNORE = [r"re:.*block_sparse_moe\.gate.*", r"re:.*shared_experts.*", r"re:.*block_sparse_moe.routed_expert.*"]
PATCH_IGNORE = ["re:.*mlp_res_proj.*", "re:.*self_attention_res_proj.*", "re:.*output_attn_res_proj.*", "re:.*routed_expert.*"]
FULL_IGNORE = [EXAMPLE_IGNORE[0], EXAMPLE_IGNORE[2]] + PATCH_IGNORE[:3] + ["re:.*lm_head", "re:.*vision_tower.*",
                                                                          "re:.*mm_projector.*"]


def llmc(src, dst, recipe):
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4A16
    with peers_quiet():
        from llmcompressor import oneshot
        from llmcompressor.modifiers.quantization import QuantizationModifier
        import llmcompressor.observers.helpers as helpers
    if recipe == "example":
        mod = QuantizationModifier(config_groups={"experts": QuantizationScheme(targets=[r"re:.*block_sparse_moe.*"],
                                                                                **NVFP4A16)}, ignore=EXAMPLE_IGNORE)
    elif recipe in ("full", "full-gfused"):
        mod = QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=FULL_IGNORE)
        if recipe == "full-gfused":
            pair = ("q_a_proj", "kv_a_proj_with_mqa")
            helpers.FUSED_LAYER_NAMES[:] = [g + ("g_proj",) if g == pair else g for g in helpers.FUSED_LAYER_NAMES]
    elif recipe == "mxfp4":
        # Moonshot's upload: the routed experts only
        mod = QuantizationModifier(targets=[r"re:.*block_sparse_moe\.experts\.\d+\.w[123]$"], scheme="MXFP4A16")
    else:
        raise SystemExit(f"unknown recipe {recipe}")
    m = load_model(src)
    with peers_quiet():
        oneshot(model=m, recipe=mod)
        m.save_pretrained(dst, save_compressed=True, save_original_format=False)


if sys.argv[1] == "llmc":
    llmc(*sys.argv[2:5])
    sys.exit(0)


def ff(*args):
    """fp4forge, never raising: (rc, last stderr line)"""
    r = subprocess.run([FF, *args, "--no-doctor", "--quiet"], capture_output=True, text=True)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    return r.returncode, (lines[-1] if lines else "(no stderr)")[:240]


def mla_groups(sd):
    """{layer prefix: [q_a, kv_a, g]} of an output's MLA layers"""
    out = {}
    for k in sd:
        if k.endswith(".self_attn.g_proj.weight_global_scale"):
            pre = k[:-len("g_proj.weight_global_scale")]
            out[pre] = [pre + p for p in ("q_a_proj", "kv_a_proj_with_mqa", "g_proj")]
    return out


if sys.argv[1] == "targets":
    # The example's recipe names its targets by regex (re:.*block_sparse_moe.*), and
    # llm-compressor writes that regex in config_groups; fp4forge's --only selects the
    # same modules and writes targets ["Linear"] with every other Linear in ignore. The
    # two configs quantize the same modules when the quantized sets and the ignore lists
    # are equal; a copy of llm-compressor's output with fp4forge's targets then goes
    # through llmc_compare.py for every other byte.
    ffd, lcd, out = sys.argv[2:5]
    qa = json.load(open(ffd + "/config.json"))["quantization_config"]
    c = json.load(open(lcd + "/config.json"))
    qb = c["quantization_config"]
    mods = [set(k[:-len(".weight_packed")] for k in load_dir(d) if k.endswith(".weight_packed")) for d in (ffd, lcd)]
    ta, tb = qa["config_groups"]["group_0"]["targets"], qb["config_groups"]["group_0"]["targets"]
    ok = mods[0] == mods[1] and set(qa["ignore"]) == set(qb["ignore"]) and len(qb["config_groups"]) == 1
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in os.listdir(lcd):
        if f != "config.json":
            os.symlink(os.path.abspath(os.path.join(lcd, f)), os.path.join(out, f))
    qb["config_groups"]["group_0"]["targets"] = ta
    json.dump(c, open(out + "/config.json", "w"), indent=2)
    verdict(ok, "example_targets_explained",
            f"llm-compressor writes the recipe's targets {tb}, fp4forge {ta}: the same {len(mods[0])} modules quantized "
            f"and the same {len(qa['ignore'])} Linears in ignore, so vLLM applies the scheme to the same layers; "
            f"compared below with fp4forge's targets put in a copy of llm-compressor's config")
    sys.exit(rc)

if sys.argv[1] == "hfload":
    # transformers + compressed-tensors load fp4forge's output into llm-compressor's K3
    # model (decompressed: compressed-tensors' run_compressed forward needs a `weight`
    # these NVFP4 Linears no longer have on CPU) and run it; its logits equal those of
    # llm-compressor's own output (full-gfused) loaded the same way
    from transformers import CompressedTensorsConfig
    ids = torch.tensor([[1, 5, 9, 33, 70, 101, 7, 300, 42, 11, 250, 3]])
    logits, infos = {}, {}
    for d in sys.argv[2:5]:
        kw = {} if d == sys.argv[2] else {"quantization_config": CompressedTensorsConfig(dequantize=True)}
        cls, _ = kimi_classes()
        with peers_quiet():   # plain from_pretrained: load_context's wrapper drops output_loading_info's tuple
            m, info = cls.from_pretrained(d, dtype=torch.bfloat16, output_loading_info=True, **kw)
        infos[d] = sum(len(v) for k, v in info.items() if k != "error_msgs") + len(info.get("error_msgs", []))
        with torch.no_grad():
            logits[d] = m.language_model(input_ids=ids).logits.float()
        del m
    bf, q, lc = (logits[d] for d in sys.argv[2:5])
    lp, lq = torch.log_softmax(bf, -1), torch.log_softmax(q, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1).mean().item()
    ok = all(v == 0 for v in infos.values()) and bool(q.isfinite().all()) and torch.equal(q, lc)
    verdict(ok, "hf_load_ff_output", f"missing/unexpected/mismatched keys {list(infos.values())} (bf16, fp4forge, llmc); "
            f"{ids.shape[1]} tokens: logits finite, equal to llm-compressor's output's: {torch.equal(q, lc)}; "
            f"KL(bf16 || fp4forge) {kl:.4f} (info: a tiny random model)")
    sys.exit(rc)

if sys.argv[1] == "explain":
    a, b, c = (load_dir(d) for d in sys.argv[2:5])
    groups = mla_groups(a)
    members = {m for g in groups.values() for m in g}
    diff = sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or not same_bits(a[k], b[k]))
    outside = [k for k in diff if k.rsplit(".", 1)[0] not in members]
    untied = [p for p, g in groups.items() if len({b[m + ".weight_global_scale"].item() for m in g}) > 1]
    tied_ff = [p for p, g in groups.items() if len({a[m + ".weight_global_scale"].item() for m in g}) == 1]
    # vLLM's NVFP4 linear keeps the largest global scale of a fused layer (and warns):
    # a member quantized under a smaller one is served scaled by gs_own / gs_max
    factors = []
    for g in groups.values():
        gs = [b[m + ".weight_global_scale"].item() for m in g]
        factors += [x / max(gs) for x in gs]
    verdict(not outside and len(untied) == len(groups) and len(tied_ff) == len(groups),
            "llmc_full_differs_only_in_g_proj_tie",
            f"{len(diff)} differing tensors, all of the MLA q_a/kv_a/g groups of {len(groups)} layers "
            f"(outside them: {outside[:2]}); llm-compressor's FUSED_LAYER_NAMES ties q_a+kv_a and leaves g_proj its "
            f"own global scale in {len(untied)}/{len(groups)} layers, fp4forge ties all three in {len(tied_ff)}; vLLM's "
            f"fused_qkv_a_g_proj keeps the largest, so llm-compressor's members would be served scaled by "
            f"{min(factors):.3f}..{max(factors):.3f}: theirs")
    diff2 = sorted(k for k in a.keys() | c.keys() if k not in a or k not in c or not same_bits(a[k], c[k]))
    verdict(not diff2, "llmc_gfused_equals_ff",
            f"with g_proj added to llm-compressor's (q_a_proj, kv_a_proj_with_mqa) fusion group, {len(a)} tensors "
            f"byte-identical to fp4forge's; differing {diff2[:3]}")
    sys.exit(rc)

FF, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
os.makedirs(WORK, exist_ok=True)
cls, cfg_cls = kimi_classes()

# 1. the tiny model
TEXT = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=2,
            moe_intermediate_size=64, num_experts=4, num_experts_per_token=2, num_shared_experts=2,
            first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32,
            qk_rope_head_dim=32, v_head_dim=32, mla_use_nope=True, mla_use_output_gate=True,
            routed_expert_hidden_size=128, latent_moe_use_norm=True, attn_res_block_size=2, hidden_act="situ",
            activation_situ_beta=1.0, routed_scaling_factor=2.5,
            linear_attn_config={"kda_layers": [], "full_attn_layers": [1, 2, 3], "num_heads": 2, "head_dim": 64,
                                "short_conv_kernel_size": 4, "use_full_rank_gate": True},
            tie_word_embeddings=False)
VISION = dict(vt_num_attention_heads=2, vt_num_hidden_layers=1, vt_hidden_size=64, vt_intermediate_size=128,
              qkv_hidden_size=96, text_hidden_size=256, init_pos_emb_height=8, init_pos_emb_width=8,
              _attn_implementation="eager")
try:
    with peers_quiet():
        kda = dict(TEXT, linear_attn_config=dict(TEXT["linear_attn_config"], kda_layers=[2], full_attn_layers=[1, 3]))
        cls(cfg_cls(text_config=kda, vision_config=VISION))
    print(f"PASS {P}_kda_layer_builds (fla present: a KDA layer builds on CPU)", flush=True)
except Exception as ex:
    print(f"SKIP {P}_kda_layer (KimiDeltaAttention cannot be built here: {type(ex).__name__}: {str(ex)[:80]}; "
          f"fla is not installed, so the tiny model is all-MLA)", flush=True)

cfg = cfg_cls(text_config=TEXT, vision_config=VISION, architectures=["KimiK3ForConditionalGeneration"])
torch.manual_seed(0)
with peers_quiet():
    model = cls(cfg)
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    for name, p in model.named_parameters():
        std = 0.01 + 0.04 * torch.rand((), generator=g).item()   # its own amax per tensor
        if p.dim() == 1 and "norm" in name:
            p.copy_(1.0 + std * torch.randn(p.shape, generator=g))
        else:
            p.copy_(std * torch.randn(p.shape, generator=g))
bf16_dir = WORK + "/bf16"
shutil.rmtree(bf16_dir, ignore_errors=True)
with peers_quiet():
    model.to(torch.bfloat16).save_pretrained(bf16_dir)
bf16 = load_dir(bf16_dir)
c0 = json.load(open(bf16_dir + "/config.json"))
verdict(c0.get("model_type") == "kimi_k3" and c0["text_config"].get("model_type") == "kimi_linear",
        "make", f"KimiK3ForConditionalGeneration bf16, {len(bf16)} tensors, "
        f"{sum('.experts.' in k for k in bf16)} routed-expert weights, config model_type {c0.get('model_type')} / "
        f"text_config {c0['text_config'].get('model_type')}")

# 2. the plan's counts: 3 MLA layers x 6 (q_a, q_b, kv_a, kv_b, o, g) + dense MLP 3 +
# 2 shared x 3 = 27; 2 MoE layers x 4 experts x 3 = 24; 2 routers
r = subprocess.run([FF, "plan", bf16_dir, "--json"], capture_output=True, text=True)
try:
    j = json.loads(r.stdout)
    got = (j["quantized_dense"], j["expected_dense"], j["quantized_experts"], j["expected_experts"],
           j["routers_ignored"], j["ok"], sum("not a tensor" in n for n in j["notes"]))
except (ValueError, KeyError) as ex:
    got = (r.returncode, str(ex)[:100], r.stderr[-200:])
verdict(got == (27, 27, 24, 24, 2, True, 0), "plan_counts", f"dense, expected, experts, expected, routers kept, ok, "
        f"unknown tensors = {got}")

# 3. fp4forge's outputs for the llmc comparisons
for out, extra in (("ff-q", []), ("ff-q-experts", ["--only", r"block_sparse_moe\.experts\.", "--allow-partial"])):
    shutil.rmtree(WORK + "/" + out, ignore_errors=True)
    st, last = ff("quantize", bf16_dir, WORK + "/" + out, *extra)
    verdict(st == 0, f"ff_quantize_{out.replace('-', '_')}", f"exit {st}" + (f": {last}" if st else ""))

# 4. the MXFP4 source, written by llm-compressor
AUX = ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point", "weight_global_scale")
mx_dir = WORK + "/mxfp4"
shutil.rmtree(mx_dir, ignore_errors=True)
try:
    llmc(bf16_dir, mx_dir, "mxfp4")
except Exception as ex:
    verdict(False, "mxfp4_make", f"llm-compressor MXFP4A16 oneshot raised {type(ex).__name__}: {str(ex)[:200]}")
    sys.exit(rc)
mcfg = json.load(open(mx_dir + "/config.json"))
qc = mcfg.pop("quantization_config")
mcfg["text_config"]["quantization_config"] = qc   # where Moonshot's config.json has it
json.dump(mcfg, open(mx_dir + "/config.json", "w"), indent=2)
src = load_dir(mx_dir)
mods = sorted(k[:-len("weight_packed")] for k in src if k.endswith(".weight_packed"))
verdict(len(mods) == 24 and all(".block_sparse_moe.experts." in m for m in mods) and
        all(src[m + "weight_packed"].dtype == torch.uint8 and src[m + "weight_scale"].dtype == torch.uint8 for m in mods),
        "mxfp4_make", f"{len(mods)} routed-expert weights MXFP4 (U8 packed {list(src[mods[0] + 'weight_packed'].shape)}, "
        f"U8 E8M0 {list(src[mods[0] + 'weight_scale'].shape)}), format {qc.get('format')}, quantization_config moved "
        f"into text_config")

from compressed_tensors.compressors import MXFP4PackedCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402

scheme = next(iter(QuantizationConfig.model_validate(qc).config_groups.values()))
direct = {m + "weight": MXFP4PackedCompressor.decompress({a: src[m + a] for a in AUX if m + a in src}, scheme)["weight"]
          for m in mods}
note = ""
try:
    from transformers import CompressedTensorsConfig
    loaded = load_model(mx_dir, quantization_config=CompressedTensorsConfig(dequantize=True)).state_dict()
    agree = sum(same_bits(direct[k], loaded[k].contiguous()) for k in direct if k in loaded)
    note = f"from_pretrained(CompressedTensorsConfig(dequantize=True)) agrees on {agree}/{len(direct)}"
    verdict(agree == len(direct), "mxfp4_reference_routes_agree", note)
except Exception as ex:
    print(f"SKIP {P}_mxfp4_reference_routes_agree (the whole-model load raised {type(ex).__name__}: {str(ex)[:120]}; "
          f"the copy is compressed-tensors' MXFP4PackedCompressor.decompress per module)", flush=True)
ref = {k: v for k, v in src.items() if not any(k.endswith("." + a) for a in AUX)}
ref.update({k: v.to(torch.bfloat16).contiguous() for k, v in direct.items()})
ref_dir = WORK + "/mxfp4-ref-bf16"
shutil.rmtree(ref_dir, ignore_errors=True)
os.makedirs(ref_dir)
save_file(ref, ref_dir + "/model.safetensors", metadata={"format": "pt"})
rc_cfg = json.loads(json.dumps(mcfg))
rc_cfg["text_config"].pop("quantization_config")
json.dump(rc_cfg, open(ref_dir + "/config.json", "w"), indent=2)

# (a) decode
dec_dir = WORK + "/ff-dec-mx"
shutil.rmtree(dec_dir, ignore_errors=True)
st, last = ff("quantize", mx_dir, dec_dir, "--ignore", ".*", "--allow-partial")
dec = load_dir(dec_dir) if st == 0 else {}
bad = [k for k in ref if k not in dec or not same_bits(dec[k], ref[k])]
verdict(st == 0 and not bad and len(dec) == len(ref), "mxfp4_decode_equals_ct",
        f"exit {st}, {len(direct)} decoded weights, {len(ref)} tensors, mismatches {len(bad)} {bad[:2]}")
# (b) reference route one pass == fp4forge on the copy
q1, q2 = WORK + "/ff-q-mx-ref", WORK + "/ff-q-mx-copy"
for d in (q1, q2):
    shutil.rmtree(d, ignore_errors=True)
st1, l1 = ff("quantize", mx_dir, q1, "--mxfp4-route", "reference")
st2, l2 = ff("quantize", ref_dir, q2)
if st1 or st2:
    verdict(False, "mxfp4_reference_route_equals_copy", f"exit {st1} ({l1}), {st2} ({l2})")
else:
    a, b = load_dir(q1), load_dir(q2)
    diff = [k for k in a.keys() | b.keys() if k not in a or k not in b or not same_bits(a[k], b[k])]
    ia, ib = (json.load(open(d + "/config.json"))["quantization_config"]["ignore"] for d in (q1, q2))
    verdict(not diff and ia == ib, "mxfp4_reference_route_equals_copy",
            f"{len(a)} tensors byte-identical, ignore lists equal ({len(ia)}); differing {diff[:3]}")
# (c) exact route: dequantized output == the copy's expert weights
q3, dq3 = WORK + "/ff-q-mx-exact", WORK + "/ff-q-mx-exact-dq"
for d in (q3, dq3):
    shutil.rmtree(d, ignore_errors=True)
r = subprocess.run([FF, "quantize", mx_dir, q3, "--no-doctor"], capture_output=True, text=True)
route = next((x.strip() for x in r.stdout.splitlines() if x.strip().startswith("mxfp4")), "(no mxfp4 line)")
r2 = subprocess.run([FF, "dequantize", q3, dq3], capture_output=True, text=True) if r.returncode == 0 else r
dq = load_dir(dq3) if r2.returncode == 0 else {}
same = [k for k in direct if k in dq and same_bits(dq[k], ref[k])]
verdict(r.returncode == 0 and len(same) == len(direct), "mxfp4_exact_route_dequantizes_to_source",
        f"{len(same)}/{len(direct)} expert weights of `fp4forge dequantize` bit-identical to compressed-tensors' decode; "
        f"{route}")
sys.exit(rc)

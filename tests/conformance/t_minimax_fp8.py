"""MiniMax-M2 from an FP8-block source (its published form), in one pass.
usage: t_minimax_fp8.py FF WORK
1. a tiny random MiniMaxM2ForCausalLM saved by transformers 5.17 (make_tiny_moe_families.py)
   is converted to MiniMax-M2's published layout: every attention projection and expert
   w1/w2/w3 FP8 E4M3 per 128x128 block (edge blocks partial), scale = amax / 448,
   weight_scale_inv = scale; the router, its correction bias, norms, embeddings and lm_head
   stay bf16; the published quantization_config (fp8, e4m3, [128, 128], dynamic).
2. the reference bf16 copy: DeepSeek's weight_dequant semantics, f32(q) * scale of block
   [r // 128, c // 128], stored bf16 (what transformers' Fp8Dequantize computes for whole
   blocks; t_deepseek_fp8.py proves fp4forge's decoder bit-exact to both).
3. fp4forge quantize of the FP8 source == fp4forge quantize of the reference copy, every
   tensor byte for byte and the ignore lists equal (one pass, no bf16 copy on disk).
WORK/ref-bf16 is left for llm-compressor (t_moe_families.sh compares its output with
WORK/ff-fp8)."""
import glob, json, os, shutil, subprocess, sys
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from fp8_block_ref import block_quantize, deepseek_dequant as weight_dequant

FF, WORK = sys.argv[1:3]
rc = 0


def verdict(ok, name, detail):
    global rc
    print(("PASS " if ok else "FAIL ") + name + " (" + detail + ")", flush=True)
    rc |= not ok


def load_dir(d):
    out = {}
    for f in sorted(glob.glob(d + "/*.safetensors")):
        with safe_open(f, "pt") as fh:
            for k in fh.keys():
                out[k] = fh.get_tensor(k)
    return out


def is_fp8_target(name, t):
    last = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
    return t.dim() == 2 and name.startswith("model.layers.") and (last.endswith("_proj") or last in ("w1", "w2", "w3"))


def copy_aux(src, dst):
    for f in os.listdir(src):
        if not f.endswith(".safetensors") and f != "config.json" and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)


src_dir = WORK + "/src"
fp8_dir, ref_dir = WORK + "/fp8", WORK + "/ref-bf16"
for d in (fp8_dir, ref_dir):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
src = load_dir(src_dir)
fp8, ref, nq = {}, {}, 0
for k, t in src.items():
    if is_fp8_target(k, t):
        q, s = block_quantize(t)
        fp8[k], fp8[k[:-len("weight")] + "weight_scale_inv"] = q, s
        ref[k] = weight_dequant(q, s)
        nq += 1
    else:
        fp8[k] = ref[k] = t
save_file(fp8, fp8_dir + "/model.safetensors", metadata={"format": "pt"})
save_file(ref, ref_dir + "/model.safetensors", metadata={"format": "pt"})
cfg = json.load(open(src_dir + "/config.json"))
json.dump(cfg, open(ref_dir + "/config.json", "w"), indent=2)
cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                              "weight_block_size": [128, 128],
                              "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}
json.dump(cfg, open(fp8_dir + "/config.json", "w"), indent=2)
copy_aux(src_dir, fp8_dir)
copy_aux(src_dir, ref_dir)
experts = sum(1 for k in fp8 if ".experts." in k and fp8[k].dtype == torch.float8_e4m3fn)
verdict(nq > 0 and experts > 0, "minimax_fp8_make",
        f"{nq} weights FP8-block ({experts} expert w1/w2/w3, {nq - experts} attention), {len(fp8)} tensors")

outs = {}
for name, d in (("ff-fp8", fp8_dir), ("ff-ref", ref_dir)):
    r = subprocess.run([FF, "quantize", d, WORK + "/" + name, "--no-doctor", "--quiet"], capture_output=True, text=True)
    if r.returncode:
        verdict(False, f"minimax_fp8_quantize_{name}", f"rc={r.returncode} {r.stderr.strip()[-200:]}")
        sys.exit(1)
    outs[name] = load_dir(WORK + "/" + name)
a, b = outs["ff-fp8"], outs["ff-ref"]
diff = [k for k in set(a) | set(b) if k not in a or k not in b or not torch.equal(
    a[k].contiguous().view(torch.uint8), b[k].contiguous().view(torch.uint8))]
ia = json.load(open(WORK + "/ff-fp8/config.json"))["quantization_config"]
ib = json.load(open(WORK + "/ff-ref/config.json"))["quantization_config"]
verdict(not diff and ia == ib, "minimax_fp8_one_pass_equals_bf16_copy",
        f"{len(a)} tensors of quantize(FP8 source) byte-identical to quantize(reference bf16 copy): "
        f"{len(a) - len(diff)}/{len(a)}; quantization_config equal: {ia == ib}"
        + (f"; differ: {sorted(diff)[:3]}" if diff else ""))
sys.exit(rc)

"""Conformance for FP8-block sources (issue 15), in one script so each step's
input is the previous step's output:

1. make: a tiny random DeepseekV3ForCausalLM saved by transformers 5.17 (bf16).
2. convert it to FP8-block (the documented script below, DeepSeek-V3's
   layout): every decoder-layer projection weight, per 128x128 block (edge
   blocks partial), scale = amax / 448 in f32 (1 for an all-zero block),
   q = (w.float() / scale).clamp(-448, 448).to(float8_e4m3fn),
   weight_scale_inv = scale (what the dequantizer multiplies by: transformers'
   FineGrainedFP8 quantizer stores 1/(448/amax), DeepSeek's checkpoints the
   same); config.json gets DeepSeek-V3's quantization_config.
3. reference bf16: transformers' own Fp8Dequantize (integrations/
   finegrained_fp8.py, the op from_pretrained(..., FineGrainedFP8Config(
   dequantize=True)) runs) on each FP8 weight, output dtype bf16; and, where
   transformers loads it on this machine, the whole model loaded with
   dequantize=True and saved (the "reference bf16 copy" a peer quantizes).
4. (a) fp4forge's decode (quantize --ignore '.*' --allow-partial: every
   module kept, FP8 weights written decoded) equals the reference bf16, bit
   for bit (max |diff| 0), tensor by tensor.
   (b) fp4forge quantizing the FP8 source in one pass == fp4forge quantizing
   the reference bf16 copy, every tensor byte for byte, ignore lists equal.
5. partial edge blocks: on `fp4forge synth --arch deepseek-v3 --source
   fp8-block` (kv_a_proj_with_mqa has 144 rows: a 16-row edge block), the
   decode equals DeepSeek's weight_dequant semantics (scale of block
   [r // 128, c // 128]) written in torch; transformers' Fp8Dequantize derives
   the block from the grid (rows // scale_rows) and is reported for what it
   does there.
6. (t_deepseek_fp8.sh) llm-compressor 0.14's NVFP4A16 oneshot of the
   reference bf16 copy (`t_deepseek_fp8.py llmc SRC DST`, ignore as its
   DeepSeek example: lm_head and the routers) compared tensor by tensor with
   fp4forge's one pass over the FP8 source by llmc_compare.py.
7. (t_deepseek_fp8.sh, vLLM venv) vLLM 0.32's CPU build loads fp4forge's
   output of the FP8 source (its compressed-tensors NVFP4A16 scheme, CPU_MLA,
   the test plugin replacing only the final NVFP4 matmul) and its prompt
   logprobs and greedy tokens equal those of `fp4forge dequantize`'s copy.
Usage: t_deepseek_fp8.py FF WORK | t_deepseek_fp8.py llmc SRC DST | t_deepseek_fp8.py vllm Q DQ
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

if sys.argv[1] == "vllm":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    import gc
    from vllm import LLM, SamplingParams
    res = {}
    for d in sys.argv[2:4]:
        llm = LLM(model=d, skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=64,
                  max_num_seqs=1)
        sp = SamplingParams(max_tokens=8, temperature=0, logprobs=5, prompt_logprobs=5, detokenize=False)
        out = llm.generate([{"prompt_token_ids": [1, 5, 9, 33, 70, 101, 7, 300, 42]}], sp)[0]
        plp = [sorted((t, v.logprob) for t, v in p.items()) if p else None for p in out.prompt_logprobs]
        glp = [sorted((t, v.logprob) for t, v in p.items()) for p in out.outputs[0].logprobs]
        res[d] = (list(out.outputs[0].token_ids), plp, glp)
        del llm
        gc.collect()
    a, b = res[sys.argv[2]], res[sys.argv[3]]
    flat = [x for p in a[1][1:] for _, x in p]
    ok = a == b and all(x == x and abs(x) != float("inf") for x in flat)
    print(("PASS" if ok else "FAIL") + f" deepseek_fp8_vllm_q_equals_dequant (vLLM CPU, CPU_MLA: prompt top-5 logprobs "
          f"and 8 greedy tokens of the NVFP4 output {'equal' if a == b else 'DIFFER from'} its dequantized copy's; "
          f"tokens {a[0]})")
    sys.exit(0 if ok else 1)

if sys.argv[1] == "llmc":
    import transformers
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.bfloat16)
    oneshot(model=m, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=["lm_head", "re:.*mlp.gate$"]))
    m.save_pretrained(sys.argv[3], save_compressed=True)
    sys.exit(0)

FF, WORK = sys.argv[1], sys.argv[2]
from fp8_block_ref import B, block_quantize, deepseek_dequant  # noqa: E402
rc = 0


def verdict(ok, name, detail):
    global rc
    print(("PASS " if ok else "FAIL ") + name + " (" + detail + ")")
    if not ok:
        rc = 1


def load_dir(d):
    out = {}
    for f in sorted(glob.glob(d + "/*.safetensors")):
        with safe_open(f, "pt") as fh:
            for k in fh.keys():
                out[k] = fh.get_tensor(k)
    return out


def is_fp8_target(name, t):
    if t.dim() != 2 or not name.startswith("model.layers.") or not name.endswith(".weight"):
        return False
    return "proj" in name.rsplit(".", 2)[-2]


def ff(*args):
    r = subprocess.run([FF, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fp4forge {' '.join(args)}: rc={r.returncode} {r.stderr.strip()[-300:]}")
    return r.stdout


os.makedirs(WORK, exist_ok=True)
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: E402
from transformers.integrations.finegrained_fp8 import Fp8Dequantize  # noqa: E402

# 1. the tiny model: dims multiples of 128 (transformers' dequantizer needs them),
# kv_lora_rank + qk_rope_head_dim = 512 (a latent width vLLM's MLA accepts:
# 320, 512, 576), topk_method/scoring_func as the published configs (vLLM
# creates e_score_correction_bias only for noaux_tc)
cfg = DeepseekV3Config(vocab_size=512, hidden_size=256, intermediate_size=256, moe_intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1,
                       n_routed_experts=4, routed_scaling_factor=2.5, kv_lora_rank=384, q_lora_rank=128,
                       qk_rope_head_dim=128, v_head_dim=64, qk_nope_head_dim=64, n_group=1, topk_group=1,
                       num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
                       max_position_embeddings=512, tie_word_embeddings=False, num_nextn_predict_layers=0,
                       topk_method="noaux_tc", scoring_func="sigmoid")
torch.manual_seed(0)
model = DeepseekV3ForCausalLM(cfg).to(torch.bfloat16)
bf16_dir, fp8_dir = WORK + "/bf16", WORK + "/fp8"
for d in (bf16_dir, fp8_dir):
    shutil.rmtree(d, ignore_errors=True)
model.save_pretrained(bf16_dir)

# 2. FP8-block conversion
src = load_dir(bf16_dir)
fp8 = {}
nq = 0
for k, t in src.items():
    if is_fp8_target(k, t):
        q, s = block_quantize(t)
        fp8[k] = q
        fp8[k[:-len("weight")] + "weight_scale_inv"] = s
        nq += 1
    else:
        fp8[k] = t
os.makedirs(fp8_dir)
save_file(fp8, fp8_dir + "/model.safetensors", metadata={"format": "pt"})
c = json.load(open(bf16_dir + "/config.json"))
c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}
json.dump(c, open(fp8_dir + "/config.json", "w"), indent=2)
for f in os.listdir(bf16_dir):
    if f not in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(bf16_dir, f), fp8_dir)
print(f"PASS deepseek_fp8_make ({nq} projection weights FP8-block, {len(fp8)} tensors)")

# 3. the reference dequantizer: transformers' Fp8Dequantize, bf16 out
deq = Fp8Dequantize(None)
ref = {}
for k, t in fp8.items():
    if k.endswith("weight_scale_inv"):
        continue
    sk = k[:-len("weight")] + "weight_scale_inv"
    ref[k] = deq._dequantize_one(t, fp8[sk], output_dtype=torch.bfloat16) if sk in fp8 else t

# the whole-model path: from_pretrained(dequantize=True) loads the FP8 source
# into bf16 parameters (experts fused by transformers 5 into gate_up_proj
# [E, 2I, H] / down_proj [E, H, I]); save_pretrained of that model raises
# ("Undefined Operation encountered!": Fp8Dequantize has no reverse op), so
# the copy is written from the loaded parameters, experts split back into
# the checkpoint's per-expert names, every other tensor the source's own.
ref_dir = WORK + "/ref-bf16"
shutil.rmtree(ref_dir, ignore_errors=True)
os.makedirs(ref_dir)
copy = dict(ref)
try:
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
    m2 = AutoModelForCausalLM.from_pretrained(fp8_dir, dtype=torch.bfloat16,
                                              quantization_config=FineGrainedFP8Config(dequantize=True))
    sd = m2.state_dict()
    I = cfg.moe_intermediate_size
    loaded = {}
    for k in ref:
        if k[:-len("weight")] + "weight_scale_inv" not in fp8:
            continue
        if ".mlp.experts." in k:
            pre, rest = k.split(".mlp.experts.")
            e, proj = int(rest.split(".")[0]), rest.split(".")[1]
            if proj == "down_proj":
                loaded[k] = sd[pre + ".mlp.experts.down_proj"][e]
            else:
                gu = sd[pre + ".mlp.experts.gate_up_proj"][e]
                loaded[k] = gu[:I] if proj == "gate_proj" else gu[I:]
        else:
            loaded[k] = sd[k]
    same = [k for k in loaded if torch.equal(loaded[k].contiguous().view(torch.int16), ref[k].view(torch.int16))]
    copy.update({k: v.contiguous() for k, v in loaded.items()})
    whole = (f"from_pretrained(FineGrainedFP8Config(dequantize=True)) on CPU: {len(same)}/{len(loaded)} FP8 weights "
             f"bitwise equal to Fp8Dequantize per tensor; reference copy written from the loaded model")
    if len(same) != len(loaded):
        rc = 1
except Exception as ex:
    whole = f"from_pretrained(dequantize=True) refused here ({type(ex).__name__}: {str(ex)[:120]}); copy written from Fp8Dequantize"
save_file({k: v.contiguous() for k, v in copy.items()}, ref_dir + "/model.safetensors", metadata={"format": "pt"})
json.dump(json.load(open(bf16_dir + "/config.json")), open(ref_dir + "/config.json", "w"), indent=2)
for f in os.listdir(bf16_dir):
    if f not in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(bf16_dir, f), ref_dir)
print(f"{'PASS' if rc == 0 else 'FAIL'} deepseek_fp8_reference ({whole})")

# 4a. fp4forge's decode == the reference, bit for bit
dec_dir = WORK + "/ff-dec"
shutil.rmtree(dec_dir, ignore_errors=True)
ff("quantize", fp8_dir, dec_dir, "--ignore", ".*", "--allow-partial", "--no-doctor", "--quiet")
dec = load_dir(dec_dir)
maxdiff, bad, n = 0.0, [], 0
for k, t in ref.items():
    d = dec.get(k)
    if d is None or d.dtype != t.dtype or d.shape != t.shape:
        bad.append(k)
        continue
    if k[:-len("weight")] + "weight_scale_inv" in fp8:
        n += 1
    maxdiff = max(maxdiff, (d.float() - t.float()).abs().max().item())
    if not torch.equal(d.view(torch.int16) if d.dtype == torch.bfloat16 else d, t.view(torch.int16) if t.dtype == torch.bfloat16 else t):
        bad.append(k)
extra = [k for k in dec if k not in ref]
verdict(not bad and not extra, "deepseek_fp8_decode_equals_transformers",
        f"{n} FP8 weights decoded, {len(ref)} tensors, max |diff| {maxdiff}, bitwise mismatches {len(bad)} {bad[:2]}, extra {extra[:2]}")

# 4b. one pass (FP8 source) == fp4forge on the reference bf16 copy
q1, q2 = WORK + "/ff-q-fp8", WORK + "/ff-q-ref"
for d in (q1, q2):
    shutil.rmtree(d, ignore_errors=True)
ff("quantize", fp8_dir, q1, "--no-doctor", "--quiet")
ff("quantize", ref_dir, q2, "--no-doctor", "--quiet")
a, b = load_dir(q1), load_dir(q2)
diff = [k for k in a if k not in b or a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or
        not torch.equal(a[k].view(torch.uint8).flatten() if a[k].dtype != torch.float32 else a[k],
                        b[k].view(torch.uint8).flatten() if b[k].dtype != torch.float32 else b[k])]
diff += [k for k in b if k not in a]
ia = json.load(open(q1 + "/config.json"))["quantization_config"]["ignore"]
ib = json.load(open(q2 + "/config.json"))["quantization_config"]["ignore"]
packed = sum(k.endswith("weight_packed") for k in a)
verdict(not diff and ia == ib, "deepseek_fp8_one_pass_equals_reference_copy",
        f"{len(a)} tensors ({packed} quantized modules) byte-identical, ignore lists equal ({len(ia)}); differing {diff[:3]}")

# 5. partial edge blocks: DeepSeek's weight_dequant semantics
syn, syn_dec = WORK + "/synth-fp8", WORK + "/synth-dec"
for d in (syn, syn_dec):
    shutil.rmtree(d, ignore_errors=True)
ff("synth", "--arch", "deepseek-v3", "--source", "fp8-block", syn)
ff("quantize", syn, syn_dec, "--ignore", ".*", "--allow-partial", "--no-doctor", "--quiet")
s8, sd = load_dir(syn), load_dir(syn_dec)
partial, bad, tf_note = 0, [], []
for k, t in s8.items():
    if t.dtype != torch.float8_e4m3fn:
        continue
    s = s8[k[:-len("weight")] + "weight_scale_inv"]
    want = deepseek_dequant(t, s)
    if t.shape[0] % B or t.shape[1] % B:
        partial += 1
        try:
            tf = deq._dequantize_one(t, s, output_dtype=torch.bfloat16)
            tf_note.append(f"{k.split('.')[-2]}: transformers {'agrees' if torch.equal(tf.view(torch.int16), want.view(torch.int16)) else 'differs (block = rows // scale_rows)'}")
        except Exception as ex:
            tf_note.append(f"{k.split('.')[-2]}: transformers raises {type(ex).__name__}")
    if not torch.equal(sd[k].view(torch.int16), want.view(torch.int16)):
        bad.append(k)
verdict(not bad and partial > 0, "deepseek_fp8_partial_blocks_equal_weight_dequant",
        f"{sum(t.dtype == torch.float8_e4m3fn for t in s8.values())} FP8 weights, {partial} with partial edge blocks, mismatches {len(bad)}; {sorted(set(tf_note))[:3]}")

# 6. for vLLM (t_deepseek_fp8.sh): its CPU MLA decode kernel takes only DeepSeek's
# own latent (kv_lora_rank 512 + qk_rope_head_dim 64 = 576; kv_a_proj_with_mqa
# then has 576 rows, a partial edge block, where transformers' dequantizer
# raises), so the same model at that width, FP8-block, quantized by fp4forge
cfg576 = DeepseekV3Config(**{**cfg.to_dict(), "kv_lora_rank": 512, "qk_rope_head_dim": 64})
torch.manual_seed(0)
m576 = DeepseekV3ForCausalLM(cfg576).to(torch.bfloat16)
b576, f576, q576 = WORK + "/bf16-mla576", WORK + "/fp8-mla576", WORK + "/ff-q-fp8-mla576"
for d in (b576, f576, q576):
    shutil.rmtree(d, ignore_errors=True)
m576.save_pretrained(b576)
src = load_dir(b576)
out = {}
for k, t in src.items():
    if is_fp8_target(k, t):
        out[k], out[k[:-len("weight")] + "weight_scale_inv"] = block_quantize(t)
    else:
        out[k] = t
os.makedirs(f576)
save_file(out, f576 + "/model.safetensors", metadata={"format": "pt"})
c = json.load(open(b576 + "/config.json"))
c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}
json.dump(c, open(f576 + "/config.json", "w"), indent=2)
ff("quantize", f576, q576, "--no-doctor", "--quiet")
kva = [k for k in out if k.endswith("kv_a_proj_with_mqa.weight")]
print(f"PASS deepseek_fp8_mla576_quantize ({len(kva)} kv_a_proj_with_mqa of shape {list(out[kva[0]].shape)}, "
      f"scales {list(out[kva[0][:-6] + 'weight_scale_inv'].shape)}; quantized for the vLLM check)")
sys.exit(rc)

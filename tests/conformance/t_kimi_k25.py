"""Conformance for Kimi-K2.5 / K2.6 (KimiK25ForConditionalGeneration, model_type kimi_k25):
a MoonViT vision tower (`vision_tower.`) and patch-merger projector (`mm_projector.`) over a
DeepSeek-V3 text model (`language_model.`, text_config.model_type "kimi_k2"), shipped by
Moonshot with the routed experts in compressed-tensors INT4 (pack-quantized, group 32,
symmetric) and text_config.quantization_config (build-h2/kimi-notes.md sections 1, 2, 4).

1. make: a tiny random Kimi_K25ForConditionalGeneration built by transformers 5.17 on CPU
   and saved in bf16 (WORK/tf-save, as transformers writes it). transformers 5.17 does not
   write the published names: save_pretrained reverts its kimi_k25 load renames
   (conversion_mapping.py "kimi_k25") too eagerly, so the text layers come out as
   `language_model.model.blocks.N.` (the vision `blocks`->`layers` rename reverted on
   the text model too), the patch embedding as `vision_tower.encoder.patch_embed.` and the
   projector norm as `model.mm_projector.pre_norm.`; its config says
   `Kimi_K25ForConditionalGeneration`, text model_type `deepseek_v3` and vision keys in
   transformers' schema. WORK/bf16 is that model under the published names (the three
   prefixes rewritten; transformers loads both layouts to the same state dict, checked)
   with Moonshot's config spelling (architectures KimiK25ForConditionalGeneration, text
   model_type kimi_k2, vision_config with Moonshot's vt_* keys beside transformers' own,
   which vLLM 0.32 reads through transformers' Kimi_K25VisionConfig). Every published name
   pattern must be present. Compared with `fp4forge synth --arch kimi-k2.5 [--source
   int4]`: name patterns, ranks, config keys; differences are printed.
2. int4: llm-compressor 0.14 oneshot, data-free, config_groups {Linear: int 4, symmetric,
   group 32, strategy group, minmax} with the Kimi-K2.6 ignore list. Verbatim
   (`re:vision_tower.*`, `re:mm_projector.*` anchored at the start) it misses
   transformers' in-memory `model.vision_tower.*` / `model.mm_projector.*`, quantizes
   the vision tower and projector and then fails to save (recorded: a PROBE line); the
   source is made with those two entries as `re:.*vision_tower.*` / `re:.*mm_projector.*`
   (routed experts only, checked). llm-compressor writes quantization_config at the TOP
   level with an explicit module ignore list under transformers' reverted names; the
   source gets the published placement and list: text_config.quantization_config, the
   published ignore list, no top-level key; tensors under the published names.
3. reference decode, two routes through the peers' code: (a) from_pretrained(src,
   dtype=bf16, CompressedTensorsConfig(dequantize=True)) (reads text_config's
   quantization_config; experts come back fused gate_up_proj/down_proj, split per
   expert). On the source as published it raises (the same anchored ignore entries give
   transformers' vision/projector Linears the INT4 scheme; PROBE line), so it runs on
   WORK/int4-tfload, the source with only those two entries widened; (b)
   PackedQuantizationCompressor.decompress module by module. Both must agree bitwise. WORK/int4-ref-bf16: the source with the decoded experts as bf16 `.weight`, the
   aux tensors gone, text_config.quantization_config removed.
   fp4forge's decode (quantize --ignore '.*' --allow-partial) == that copy, bitwise.
4. fp4forge's one pass over the INT4 source == fp4forge on the reference copy (every tensor
   byte for byte, configs' quantization_config equal); placement of the output's
   quantization_config reported (top level, none left in text_config). (t_kimi_k25.sh)
   llm-compressor's NVFP4A16 oneshot of the reference copy (`t_kimi_k25.py llmc SRC DST`,
   the ignore list of its Kimi-K2.6 NVFP4 example) vs the one pass, by llmc_compare.py,
   after llm-compressor's output names are mapped back to the published ones
   (DST-pub; the raw names it wrote are reported).
5. (t_kimi_k25.sh, vLLM venv) vLLM 0.32 CPU + the fp4forge test plugin loads the one-pass
   output and `fp4forge dequantize`'s copy (skip_tokenizer_init, prompt_token_ids); prompt
   top-5 logprobs and 8 greedy tokens must be equal. As installed, vLLM 0.32 CPU cannot start
   a worker for any kimi_k25 model (numba/llvmlite vs its Triton-override scan: the vllm
   mode says how; a named SKIP line with its error); the retry hides numba, and loads.
PROBE lines record what a peer does (names, config placement, refusals); they carry no verdict.
Usage: t_kimi_k25.py FF WORK | t_kimi_k25.py llmc SRC DST | t_kimi_k25.py vllm Q DQ
"""
import contextlib
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from conf_util import bits, desc, load_dir, peers_quiet, same_bits  # noqa: E402

P = "kimi_k25"
# the published Kimi-K2.6 quantization_config (notes section 1)
PUB_IGNORE = ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
              "re:.*lm_head.*", "re:vision_tower.*", "re:mm_projector.*"]
PUB_WEIGHTS = {"actorder": None, "block_structure": None, "dynamic": False, "group_size": 32, "num_bits": 4,
               "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": True, "type": "int"}
# llm-compressor's Kimi-K2.6 NVFP4 example, self_attn left quantized (fp4forge quantizes it)
LLMC_NVFP4_IGNORE = ["re:.*mlp.gate$", "re:.*lm_head", "re:.*embed_tokens$", "re:.*mm_projector.*", "re:.*vision.*"]
# transformers 5.17 save_pretrained -> the published names
TF_TO_PUB = [("language_model.model.blocks.", "language_model.model.layers."),
             ("vision_tower.encoder.patch_embed.", "vision_tower.patch_embed."),
             ("model.mm_projector.", "mm_projector.")]


def to_pub(k):
    for a, b in TF_TO_PUB:
        if k.startswith(a):
            return b + k[len(a):]
    return k


def env_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")


PROMPT = [1, 5, 9, 33, 70, 101, 7, 300, 42]

# ---------------------------------------------------------------- vLLM child (its own venv)
if len(sys.argv) > 2 and sys.argv[1] == "--vllm-child":
    # one model per process: prints CHILD ok <json> or CHILD <error> (the attempt's kwargs in argv[3])
    env_vllm()
    import traceback
    kw = json.loads(sys.argv[3])
    if kw.pop("hide_numba", False):
        # the workaround for vLLM 0.32 CPU's worker-init crash (see the vllm mode): numba
        # looks uninstalled, so kimi_k25_vision_fused.py does not import it (nor llvmlite)
        import importlib.abc

        class HideNumba(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "numba" or name.startswith("numba."):
                    raise ModuleNotFoundError(f"No module named {name!r} (hidden by t_kimi_k25.py)", name=name)
                return None
        sys.meta_path.insert(0, HideNumba())
    try:
        from vllm import LLM, SamplingParams
        llm = LLM(model=sys.argv[2], skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_num_seqs=1,
                  **kw)
        sp = SamplingParams(max_tokens=8, temperature=0, logprobs=5, prompt_logprobs=5, detokenize=False)
        out = llm.generate([{"prompt_token_ids": PROMPT}], sp)[0]
        plp = [sorted((t, v.logprob) for t, v in p.items()) if p else None for p in out.prompt_logprobs]
        glp = [sorted((t, v.logprob) for t, v in p.items()) for p in out.outputs[0].logprobs]
        # what vLLM built: the plugin marks the layers it handled
        m = None
        try:
            m = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        except Exception:
            pass
        marks = {}
        if m is not None:
            for n, mod in m.named_modules():
                t = getattr(mod, "fp4forge_test_dequantized", None)
                if t:
                    marks[t] = marks.get(t, 0) + 1
        print("CHILD ok " + json.dumps({"tokens": list(out.outputs[0].token_ids), "plp": plp, "glp": glp,
                                         "marks": marks}), flush=True)
    except BaseException as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        where = [f"{os.path.basename(w.filename)}:{w.lineno}" for w in tb[-2:]]
        msg = " ".join(str(exc).split())[:400]
        print(f"CHILD {type(exc).__name__}: {msg} ({' <- '.join(reversed(where))})", flush=True)
    sys.exit(0)

if len(sys.argv) > 3 and sys.argv[1] == "vllm":
    q, dq = sys.argv[2], sys.argv[3]
    # attempts, in order; the next only when the previous one failed to load the NVFP4
    # output (each failure printed as a PROBE line with vLLM's error). vLLM 0.32's
    # kimi_k25.py imports transformers_utils/processors/kimi_k25_vision_fused.py, which
    # imports numba (hence llvmlite) at module level when numba is installed; the CPU
    # platform's register_triton_kernel_overrides (triton_utils/dispatcher.py:139) then scans
    # every module namespace and calls vars(obj).get on llvmlite.binding.ffi.lib, whose
    # __getattr__ answers `__dict__` with a _lib_fn_wrapper: AttributeError at worker init,
    # for any Kimi-K2.5 checkpoint, bf16 included. Hiding numba (as a venv without it)
    # makes vLLM take its "remote HF" image-processor branch and load.
    ATTEMPTS = [{"max_model_len": 64}, {"max_model_len": 64, "hide_numba": True},
                {"max_model_len": 64, "hide_numba": True, "limit_mm_per_prompt": {"vision_chunk": 0}}]
    rc = 0

    def child(path, kw):
        try:
            r = subprocess.run([sys.executable, __file__, "--vllm-child", path, json.dumps(kw)], capture_output=True,
                               text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return "no report (timed out after 900 s)", None
        sys.stderr.write(r.stderr)
        ends = [ln[6:] for ln in r.stdout.splitlines() if ln.startswith("CHILD ")]
        if not ends:
            return f"no report (exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]})", None
        if ends[0].startswith("ok "):
            return "ok", json.loads(ends[0][3:])
        return ends[0], None

    res, used, errs = {}, None, []
    for kw in ATTEMPTS:
        end, got = child(q, kw)
        if got is None:
            errs.append((kw, end))
            # vLLM's own refusal, not fp4forge's: named, no verdict; the next attempt decides
            print(f"SKIP {P}_vllm_load_attempt_{len(errs)} (vLLM 0.32 CPU refused {os.path.basename(q)} with "
                  f"{json.dumps(kw)}: {end})", flush=True)
            continue
        res[q], used = got, kw
        break
    if used is None:
        print(f"FAIL {P}_vllm_loads (vLLM 0.32 CPU refused the NVFP4 output with every attempt; last: "
              f"{errs[-1][1] if errs else '?'})", flush=True)
        sys.exit(1)
    end, got = child(dq, used)
    if got is None:
        print(f"FAIL {P}_vllm_loads (the NVFP4 output loaded with {json.dumps(used)}, the dequantized copy did not: "
              f"{end})", flush=True)
        sys.exit(1)
    res[dq] = got
    a, b = res[q], res[dq]
    print(f"PASS {P}_vllm_loads (vLLM 0.32 CPU, {json.dumps(used)}: NVFP4 output and dequantized copy ran; "
          f"plugin-handled layers in the NVFP4 model {a['marks'] or 'unknown'}, in the copy {b['marks'] or 'none'})",
          flush=True)
    flat = [x for p in a["plp"][1:] for _, x in p]
    same = (a["tokens"], a["plp"], a["glp"]) == (b["tokens"], b["plp"], b["glp"])
    ok = same and all(x == x and abs(x) != float("inf") for x in flat)
    print(("PASS" if ok else "FAIL") + f" {P}_vllm_q_equals_dequant (text only, prompt_token_ids {len(PROMPT)} tokens: "
          f"prompt top-5 logprobs and 8 greedy tokens of the NVFP4 output {'equal' if same else 'DIFFER from'} "
          f"the dequantized copy's; tokens {a['tokens']}"
          + ("" if same else f" vs {b['tokens']}; first prompt logprobs {a['plp'][1][:2]} vs {b['plp'][1][:2]}") + ")",
          flush=True)
    sys.exit(0 if ok else 1)

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

rc = 0


def verdict(ok, name, detail):
    global rc
    print(("PASS " if ok else "FAIL ") + P + "_" + name + " (" + detail + ")", flush=True)
    if not ok:
        rc = 1


def probe(name, detail):
    print(f"PROBE {P}_{name} ({detail})", flush=True)


def pattern(k):
    return re.sub(r"\.\d+\.", ".N.", k)


def copy_aux(src, dst):
    for f in os.listdir(src):
        if f != "config.json" and not f.endswith(".safetensors") and not f.endswith(".safetensors.index.json") \
                and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)


def write_ckpt(dst, tensors, config, aux_from=None):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    save_file({k: v.contiguous() for k, v in tensors.items()}, dst + "/model.safetensors", metadata={"format": "pt"})
    json.dump(config, open(dst + "/config.json", "w"), indent=2)
    if aux_from:
        copy_aux(aux_from, dst)


# ---------------------------------------------------------------- llm-compressor NVFP4A16
if len(sys.argv) > 3 and sys.argv[1] == "llmc":
    # the peer's NVFP4A16 of the reference copy with its Kimi-K2.6 example's ignore list;
    # DST as llm-compressor saves it, DST-pub the same under the published names (tensors
    # and ignore entries renamed by TF_TO_PUB; config.json the source's spelling)
    src, dst = sys.argv[2], sys.argv[3]
    with peers_quiet():
        from transformers.models.kimi_k25 import Kimi_K25ForConditionalGeneration
        from llmcompressor import oneshot
        from llmcompressor.modifiers.quantization import QuantizationModifier
        m = Kimi_K25ForConditionalGeneration.from_pretrained(src, dtype=torch.bfloat16)
        oneshot(model=m, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=LLMC_NVFP4_IGNORE))
        shutil.rmtree(dst, ignore_errors=True)
        m.save_pretrained(dst, save_compressed=True)
    t = load_dir(dst)
    c = json.load(open(dst + "/config.json"))
    qc = c.get("quantization_config")
    renamed = {}
    for k in t:
        for a, b in TF_TO_PUB:
            if k.startswith(a):
                renamed[f"{a}* -> {b}*"] = renamed.get(f"{a}* -> {b}*", 0) + 1
    tq = c.get("text_config", {}).get("quantization_config")
    where = " and ".join(w for w, v in (("top level", qc), ("text_config", tq)) if v) or "nowhere"
    print(f"PROBE {P}_llmc_names (llm-compressor saved {len(t)} tensors, quantization_config at {where}; config "
          f"architectures {c.get('architectures')}, text model_type {c.get('text_config', {}).get('model_type')!r} "
          f"(its resave_config keeps transformers' serialization unless the source text_config has a dtype key); "
          f"tensors not under the published names, renamed for the comparison (count): {renamed}; ignore entries "
          f"{len((qc or {}).get('ignore', []))} explicit module names)", flush=True)
    pc = json.load(open(src + "/config.json"))
    pc.pop("quantization_config", None)
    pc.get("text_config", {}).pop("quantization_config", None)
    if qc:
        qc = dict(qc)
        qc["ignore"] = [to_pub(x) for x in qc.get("ignore", [])]
        pc["quantization_config"] = qc
    write_ckpt(dst + "-pub", {to_pub(k): v for k, v in t.items()}, pc, aux_from=src)
    sys.exit(0)

# ---------------------------------------------------------------- main
FF, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
os.makedirs(WORK, exist_ok=True)


def ff(*args):
    # --no-doctor: the tiny checkpoints have no tokenizer (doctor would stop first); synth takes neither flag
    extra = [] if args[0] == "synth" else ["--no-doctor", "--quiet"]
    r = subprocess.run([FF, *args, *extra], capture_output=True, text=True)
    return r.returncode, [x for x in r.stderr.splitlines() if x.strip()]


def last(lines):
    return (lines[-1] if lines else "(no stderr)")[:240]


with peers_quiet():
    from transformers import CompressedTensorsConfig, DeepseekV3Config
    from transformers.models.kimi_k25 import Kimi_K25Config, Kimi_K25ForConditionalGeneration
    from transformers.models.kimi_k25.configuration_kimi_k25 import Kimi_K25VisionConfig

# 1. the tiny model. Text: t_deepseek_fp8.py's mla576 geometry (kv_lora_rank 512 +
# qk_rope_head_dim 64: the only latent vLLM's CPU MLA kernel takes) with
# moe_intermediate_size 96 (three INT4 groups of 32 per down_proj row: a decoder assuming
# power-of-two group counts shows). Vision: 2 blocks of width 64 (two INT4/NVFP4 groups).
TEXT = dict(vocab_size=512, hidden_size=256, intermediate_size=256, moe_intermediate_size=96,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1,
            n_routed_experts=4, routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=128,
            qk_rope_head_dim=64, v_head_dim=64, qk_nope_head_dim=64, n_group=1, topk_group=1,
            num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
            max_position_embeddings=512, tie_word_embeddings=False, num_nextn_predict_layers=0,
            topk_method="noaux_tc", scoring_func="sigmoid")
VIS = dict(patch_size=14, pos_emb_height=8, pos_emb_width=8, pos_emb_time=4, num_attention_heads=2,
           num_hidden_layers=2, hidden_size=64, intermediate_size=128, merge_kernel_size=[2, 2])
tf_dir, bf16_dir = WORK + "/tf-save", WORK + "/bf16"
try:
    with peers_quiet():
        cfg = Kimi_K25Config(text_config=DeepseekV3Config(**TEXT), vision_config=Kimi_K25VisionConfig(**VIS),
                             projection_hidden_size=VIS["hidden_size"], tie_word_embeddings=False)
        torch.manual_seed(0)
        model = Kimi_K25ForConditionalGeneration(cfg).to(torch.bfloat16)
        mem = model.state_dict()
        shutil.rmtree(tf_dir, ignore_errors=True)
        model.save_pretrained(tf_dir)
        del model
except Exception as ex:
    verdict(False, "make", f"Kimi_K25ForConditionalGeneration on CPU raised {type(ex).__name__}: {str(ex)[:300]}")
    sys.exit(1)
tfsd = load_dir(tf_dir)
tfc = json.load(open(tf_dir + "/config.json"))
# the published layout (notes section 2), as patterns over the tiny model
PUB_PATTERNS = (
    ["language_model.model.embed_tokens.weight", "language_model.model.norm.weight", "language_model.lm_head.weight"]
    + [f"language_model.model.layers.N.{n}.weight" for n in
       ("input_layernorm", "post_attention_layernorm", "self_attn.q_a_proj", "self_attn.q_b_proj",
        "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.o_proj", "self_attn.q_a_layernorm",
        "self_attn.kv_a_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate",
        "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj",
        "mlp.experts.N.gate_proj", "mlp.experts.N.up_proj", "mlp.experts.N.down_proj")]
    + ["language_model.model.layers.N.mlp.gate.e_score_correction_bias"]
    + [f"vision_tower.patch_embed.proj.{s}" for s in ("weight", "bias")] + ["vision_tower.patch_embed.pos_emb.weight"]
    + [f"vision_tower.encoder.blocks.N.{n}.{s}" for n in ("wqkv", "wo", "mlp.fc0", "mlp.fc1", "norm0", "norm1")
       for s in ("weight", "bias")]
    + [f"vision_tower.encoder.final_layernorm.{s}" for s in ("weight", "bias")]
    + [f"mm_projector.{n}.{s}" for n in ("pre_norm", "proj.0", "proj.2") for s in ("weight", "bias")])
tf_pats = {pattern(k) for k in tfsd}
pub_pats = {p.replace("proj.0", "proj.N").replace("proj.2", "proj.N") for p in PUB_PATTERNS}
off = sorted(tf_pats - pub_pats)
probe("transformers_save_names", f"transformers 5.17 save_pretrained wrote {len(tfsd)} tensors; "
      f"{len(off)} name patterns not in the published layout: {off[:4]}{' ...' if len(off) > 4 else ''}; "
      f"renamed here: {[f'{a}* -> {b}*' for a, b in TF_TO_PUB]}; config: architectures {tfc.get('architectures')}, "
      f"text_config.model_type {tfc['text_config'].get('model_type')!r}, vision_config keys "
      f"{sorted(k for k in tfc['vision_config'] if k not in ('transformers_version',))}")
bf16 = {to_pub(k): v for k, v in tfsd.items()}
missing = sorted(pub_pats - {pattern(k) for k in bf16})
extra = sorted({pattern(k) for k in bf16} - pub_pats)
# the published config spelling (notes section 1); transformers' vision keys kept beside
# Moonshot's vt_* ones: vLLM 0.32 and transformers read only theirs (Kimi_K25VisionConfig)
pubc = json.loads(json.dumps(tfc))
pubc["architectures"] = ["KimiK25ForConditionalGeneration"]
pubc["text_config"]["model_type"] = "kimi_k2"
pubc["media_placeholder_token_id"] = pubc.get("image_token_id", 163605)
pubc["use_unified_vision_chunk"] = True
vc = pubc["vision_config"]
vc.update({"init_pos_emb_height": VIS["pos_emb_height"], "init_pos_emb_width": VIS["pos_emb_width"],
           "init_pos_emb_time": VIS["pos_emb_time"], "pos_emb_type": "divided_fixed",
           "vt_num_attention_heads": VIS["num_attention_heads"], "vt_num_hidden_layers": VIS["num_hidden_layers"],
           "vt_hidden_size": VIS["hidden_size"], "vt_intermediate_size": VIS["intermediate_size"],
           "video_attn_type": "spatial_temporal", "merge_type": "sd2_tpool", "mm_projector_type": "patchmerger",
           "mm_hidden_size": VIS["hidden_size"], "projector_hidden_act": "gelu", "projector_ln_eps": 1e-5,
           "text_hidden_size": TEXT["hidden_size"]})
write_ckpt(bf16_dir, bf16, pubc, aux_from=tf_dir)
# transformers must read the published layout back to the very state dict it built
try:
    with peers_quiet():
        m2, info = Kimi_K25ForConditionalGeneration.from_pretrained(bf16_dir, dtype=torch.bfloat16,
                                                                    output_loading_info=True)
        sd2 = m2.state_dict()
        del m2
    issues = {k: v for k, v in info.items() if v}
    # values compared in f32: transformers loads e_score_correction_bias in f32 whatever the
    # checkpoint holds (_keep_in_fp32_modules), the model built here had it cast to bf16
    differ = [k for k in mem if k not in sd2 or mem[k].shape != sd2[k].shape or not torch.equal(mem[k].float(),
                                                                                                 sd2[k].float())]
    widened = sorted({k.split(".")[-1] for k in mem if k in sd2 and mem[k].dtype != sd2[k].dtype})
    roundtrip = f"transformers reads WORK/bf16 back: loading issues {issues or 'none'}, {len(differ)} of {len(mem)} " \
                f"state-dict tensors differ in value from the model saved {differ[:2]} (loaded in f32: {widened})"
except Exception as ex:
    differ, issues = ["(raised)"], {}
    roundtrip = f"transformers from_pretrained(WORK/bf16) raised {type(ex).__name__}: {str(ex)[:160]}"
experts = [k for k in bf16 if ".mlp.experts." in k]
verdict(not missing and not extra and not differ and not issues, "make",
        f"Kimi_K25ForConditionalGeneration bf16 on CPU: {len(bf16)} tensors under the published names "
        f"({len(experts)} per-expert weights), published patterns missing {missing}, unexpected {extra}; {roundtrip}")

# 1b. fp4forge synth's kimi-k2.5 vs what transformers (renamed) writes
for src_kind in ("bf16", "int4"):
    sd = f"{WORK}/synth-{src_kind}"
    shutil.rmtree(sd, ignore_errors=True)
    st, err = ff("synth", "--arch", "kimi-k2.5", *(["--source", "int4"] if src_kind == "int4" else []), sd)
    if st:
        verdict(False, f"synth_{src_kind}", f"fp4forge synth exit {st}: {last(err)}")
        continue
    s = load_dir(sd)
    sc = json.load(open(sd + "/config.json"))
    if src_kind == "bf16":
        sp = {pattern(k): (v.dim(), str(v.dtype)) for k, v in s.items()}
        tp = {pattern(k): (v.dim(), str(v.dtype)) for k, v in bf16.items()}
        only_s, only_t = sorted(set(sp) - set(tp)), sorted(set(tp) - set(sp))
        rank = sorted(f"{p}: synth {sp[p][0]}-D, transformers {tp[p][0]}-D" for p in set(sp) & set(tp) if sp[p] != tp[p])
        kt, ks = set(pubc["text_config"]), set(sc["text_config"])
        kv, ksv = set(pubc["vision_config"]), set(sc["vision_config"])
        kk, kks = set(pubc), set(sc)
        probe("synth_vs_transformers", f"names: only in synth {only_s}, only in transformers {only_t}; rank/dtype "
              f"differences {rank}; top-level keys only in synth {sorted(kks - kk)}, only here {sorted(kk - kks)}; "
              f"text_config keys only in synth {sorted(ks - kt)}, only in transformers' {sorted(kt - ks)}; "
              f"vision_config keys only in synth {sorted(ksv - kv)}, only here {sorted(kv - ksv)}; synth "
              f"architectures {sc.get('architectures')}, text model_type {sc['text_config'].get('model_type')!r}")
    else:
        sq = sc["text_config"].get("quantization_config") or {}
        probe("synth_int4_config", f"quantization_config at top level: {'yes' if sc.get('quantization_config') else 'no'}, "
              f"in text_config: {'yes' if sq else 'no'}; ignore {sq.get('ignore')} (published {PUB_IGNORE}); "
              f"weights {json.dumps((sq.get('config_groups') or {}).get('group_0', {}).get('weights'))}; "
              f"{sum(k.endswith('weight_packed') for k in s)} packed modules, scale dtype "
              f"{sorted({str(v.dtype) for k, v in s.items() if k.endswith('weight_scale')})}")

# 2. the INT4 source, written by llm-compressor
with peers_quiet():
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier


def int4_recipe(ignore):
    return QuantizationModifier(config_groups={"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                           "group_size": 32, "dynamic": False, "observer": "minmax"}}},
        ignore=ignore)


# 2a. the published ignore list verbatim, as a recipe
try:
    with peers_quiet():
        m = Kimi_K25ForConditionalGeneration.from_pretrained(bf16_dir, dtype=torch.bfloat16)
        oneshot(model=m, recipe=int4_recipe(PUB_IGNORE))
    qd = [n for n, mod in m.named_modules() if getattr(mod, "quantization_scheme", None) is not None]
    nonexp = [n for n in qd if ".mlp.experts." not in n]
    try:
        with peers_quiet():
            m.save_pretrained(WORK + "/int4-verbatim", save_compressed=True)
        saved = "save_pretrained succeeded"
    except Exception as ex:
        saved = f"save_pretrained raised {type(ex).__name__}: {' '.join(str(ex).split())[:160]}"
    probe("int4_published_ignore_verbatim", f"llm-compressor with the published ignore list as its recipe quantizes "
          f"{len(qd)} modules, {len(nonexp)} outside the routed experts {nonexp[:3]}{' ...' if len(nonexp) > 3 else ''}: "
          f"re:vision_tower.* / re:mm_projector.* are matched from the start of transformers' in-memory names "
          f"model.vision_tower.* / model.mm_projector.*; {saved}")
    del m
except Exception as ex:
    probe("int4_published_ignore_verbatim", f"raised {type(ex).__name__}: {str(ex)[:200]}")
shutil.rmtree(WORK + "/int4-verbatim", ignore_errors=True)

# 2b. the source
RECIPE_IGNORE = [x.replace("re:vision_tower", "re:.*vision_tower").replace("re:mm_projector", "re:.*mm_projector")
                 for x in PUB_IGNORE]
llmc_int4, int4_dir = WORK + "/int4-llmc", WORK + "/int4"
try:
    with peers_quiet():
        m = Kimi_K25ForConditionalGeneration.from_pretrained(bf16_dir, dtype=torch.bfloat16)
        oneshot(model=m, recipe=int4_recipe(RECIPE_IGNORE))
        shutil.rmtree(llmc_int4, ignore_errors=True)
        m.save_pretrained(llmc_int4, save_compressed=True)
        del m
except Exception as ex:
    verdict(False, "int4_make", f"llm-compressor oneshot/save raised {type(ex).__name__}: {str(ex)[:200]}")
    sys.exit(1)
raw = load_dir(llmc_int4)
lc = json.load(open(llmc_int4 + "/config.json"))
lqc = lc.get("quantization_config")
probe("int4_llmc_writes", f"llm-compressor's save: quantization_config at "
      f"{'top level' if lqc else 'nowhere at top level'}"
      f"{', also in text_config' if lc['text_config'].get('quantization_config') else ', none in text_config'}; "
      f"ignore = {len((lqc or {}).get('ignore', []))} explicit module names (e.g. {(lqc or {}).get('ignore', [])[:2]}), "
      f"not the regexes; tensor names outside the published layout "
      f"{sorted({pattern(k) for k in raw if to_pub(k) != k})[:3]}")
src = {to_pub(k): v for k, v in raw.items()}
mods = sorted(k[:-len("weight_packed")] for k in src if k.endswith(".weight_packed"))
exp_mods = [mm for mm in mods if re.search(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.$", mm)]
want_exp = TEXT["n_routed_experts"] * 3 * (TEXT["num_hidden_layers"] - TEXT["first_k_dense_replace"])
qc = json.loads(json.dumps(lqc))
qc["ignore"] = list(PUB_IGNORE)
g0 = qc["config_groups"]["group_0"]
wdiff = {k: (g0["weights"].get(k), v) for k, v in PUB_WEIGHTS.items() if g0["weights"].get(k) != v}
srcc = json.loads(json.dumps(pubc))
srcc["text_config"]["quantization_config"] = qc
write_ckpt(int4_dir, src, srcc, aux_from=bf16_dir)
ex0 = exp_mods[0] if exp_mods else ""
shown = ", ".join(f"{a} {desc(src[ex0 + a])}" + (f"={src[ex0 + a].tolist()}" if a == "weight_shape" else "")
                  for a in ("weight_packed", "weight_scale", "weight_shape") if ex0 + a in src)
verdict(len(exp_mods) == want_exp and len(mods) == want_exp and not wdiff and qc.get("format") == "pack-quantized"
        and g0.get("targets") == ["Linear"], "int4_make",
        f"llm-compressor quantized {len(mods)} modules, {len(exp_mods)}/{want_exp} routed experts and nothing else; "
        f"{ex0}: {shown}; weights args vs the published ones differing {wdiff or 'none'}; format {qc.get('format')}; "
        f"written to WORK/int4 with quantization_config moved to text_config, the published ignore list, the "
        f"published names")

# 3. reference decode
from compressed_tensors.compressors import PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402

AUX = ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point", "weight_global_scale")
scheme = next(iter(QuantizationConfig.model_validate(qc).config_groups.values()))
comp = PackedQuantizationCompressor   # decompress is a classmethod
direct = {}
for mm in mods:
    direct[mm + "weight"] = comp.decompress({a: src[mm + a] for a in AUX if mm + a in src}, scheme)["weight"]
I = TEXT["moe_intermediate_size"]


def tf_decode(d):
    """route (a) on checkpoint d: (decoded expert weights per published name, note); raises
    what transformers raises"""
    with peers_quiet():
        model, info = Kimi_K25ForConditionalGeneration.from_pretrained(
            d, dtype=torch.bfloat16, quantization_config=CompressedTensorsConfig(dequantize=True),
            output_loading_info=True)
    issues = {k: v for k, v in info.items() if v}
    sd = model.state_dict()
    got = {}
    for mm in mods:
        k = mm + "weight"
        pre, rest = k.split(".mlp.experts.")
        e, proj = int(rest.split(".")[0]), rest.split(".")[1]
        fk = "model." + pre.replace("language_model.model.", "language_model.") + ".mlp.experts."
        if fk + "down_proj" in sd:
            if proj == "down_proj":
                got[k] = sd[fk + "down_proj"][e]
            else:
                gu = sd[fk + "gate_up_proj"][e]
                got[k] = gu[:I] if proj == "gate_proj" else gu[I:]
    qmods = [n for n, mod in model.named_modules() if getattr(mod, "quantization_scheme", None) is not None]
    vq = [n for n in qmods if "vision_tower" in n or "mm_projector" in n]
    del model, sd
    return got, (f"{len(got)} expert weights came back fused (gate_up_proj/down_proj), split per expert; loading "
                 f"issues { {k: sorted(v)[:2] if isinstance(v, (list, set)) else v for k, v in issues.items()} or 'none'}; "
                 f"vision/projector modules given an INT4 scheme {len(vq)}")


# (a) on the source as published; if transformers cannot load it, recorded and retried on a
# copy whose config differs only in the two anchored ignore entries (`re:.*vision_tower.*`,
# `re:.*mm_projector.*`, which match transformers' model.vision_tower / model.mm_projector)
loaded, note = {}, ""
try:
    loaded, note = tf_decode(int4_dir)
    note = "from_pretrained(CompressedTensorsConfig(dequantize=True)) on WORK/int4 (text_config's quantization_config): " + note
except Exception as ex:
    err = " ".join(str(ex).split())[:200]
    probe("tf_load_published_ignore", f"transformers 5.17 from_pretrained(WORK/int4, CompressedTensorsConfig("
          f"dequantize=True)) raised {type(ex).__name__}: {err}; its log lists the vision tower's and projector's bf16 "
          f"weights UNEXPECTED and their weight_packed/weight_scale/weight_shape MISSING: the published "
          f"re:vision_tower.* / re:mm_projector.* do not match transformers' model.vision_tower.* / "
          f"model.mm_projector.*, so compressed-tensors gives those Linears the INT4 scheme")
    tfl = WORK + "/int4-tfload"
    c = json.loads(json.dumps(srcc))
    c["text_config"]["quantization_config"]["ignore"] = RECIPE_IGNORE
    write_ckpt(tfl, src, c, aux_from=bf16_dir)
    try:
        loaded, note = tf_decode(tfl)
        note = ("from_pretrained(CompressedTensorsConfig(dequantize=True)) on WORK/int4-tfload (the source, ignore "
                "entries re:.*vision_tower.* / re:.*mm_projector.*): " + note)
    except Exception as ex2:
        note = f"from_pretrained(dequantize=True) raised {type(ex2).__name__} on WORK/int4-tfload too: " \
               f"{' '.join(str(ex2).split())[:200]}"
agree = [k for k in direct if k in loaded and same_bits(direct[k], loaded[k].contiguous())]
ok_routes = bool(loaded) and len(agree) == len(direct)
verdict(ok_routes, "reference_routes_agree",
        f"{note}; compressor.decompress per module: {len(direct)} weights "
        f"{sorted({str(v.dtype) for v in direct.values()})}; bitwise equal {len(agree)}/{len(direct)} "
        f"{[k for k in direct if k not in agree][:2]}")
chosen = {k: v.to(torch.bfloat16) for k, v in (loaded if ok_routes else direct).items()}
ref = {k: v for k, v in src.items() if not any(k.endswith("." + a) for a in AUX)}
ref.update({k: v.contiguous() for k, v in chosen.items()})
refc = json.loads(json.dumps(srcc))
refc["text_config"].pop("quantization_config", None)
ref_dir = WORK + "/int4-ref-bf16"
write_ckpt(ref_dir, ref, refc, aux_from=bf16_dir)
print(f"PASS {P}_reference_copy ({ref_dir}: {len(ref)} tensors, {len(chosen)} decoded expert weights from route "
      f"{'(a)' if ok_routes else '(b)'})", flush=True)

dec_dir = WORK + "/ff-dec"
shutil.rmtree(dec_dir, ignore_errors=True)
st, err = ff("quantize", int4_dir, dec_dir, "--ignore", ".*", "--allow-partial")
if st:
    verdict(False, "decode_equals_ct", f"fp4forge exit {st}: {last(err)}")
else:
    dec = load_dir(dec_dir)
    bad = [k for k in ref if k not in dec or not same_bits(dec[k], ref[k])]
    extra = [k for k in dec if k not in ref]
    maxdiff = max([(dec[k].float() - ref[k].float()).abs().max().item() for k in ref
                   if k in dec and dec[k].shape == ref[k].shape and dec[k].is_floating_point()] or [0.0])
    meta = [f"{k}: ff {desc(dec[k])} ref {desc(ref[k])}" for k in bad if k in dec and
            (dec[k].dtype != ref[k].dtype or dec[k].shape != ref[k].shape)]
    dc = json.load(open(dec_dir + "/config.json"))
    verdict(not bad and not extra, "decode_equals_ct",
            f"{sum(1 for mm in mods if mm + 'weight' in dec)} decoded expert weights, {len(ref)} tensors, max |diff| "
            f"{maxdiff}, mismatches {len(bad)} {bad[:2]} {meta[:1]}, extra {extra[:3]}; output config: "
            f"quantization_config top level {'present' if dc.get('quantization_config') else 'absent'}, text_config's "
            f"{'present' if dc.get('text_config', {}).get('quantization_config') else 'absent'}")

# 4. one pass == fp4forge on the reference copy
q1, q2 = WORK + "/ff-q", WORK + "/ff-q-ref"
for d in (q1, q2):
    shutil.rmtree(d, ignore_errors=True)
st1, e1 = ff("quantize", int4_dir, q1)
st2, e2 = ff("quantize", ref_dir, q2)
if st1 or st2:
    verdict(False, "one_pass_equals_reference_copy", f"fp4forge exit {st1} on the source ({last(e1) if st1 else 'ok'}), "
            f"{st2} on the reference copy ({last(e2) if st2 else 'ok'})")
else:
    a, b = load_dir(q1), load_dir(q2)
    diff = [k for k in a if k not in b or not same_bits(a[k], b[k])] + [k for k in b if k not in a]
    ca, cb = json.load(open(q1 + "/config.json")), json.load(open(q2 + "/config.json"))
    qa, qb = ca.get("quantization_config"), cb.get("quantization_config")
    packed = sorted(k[:-len(".weight_packed")] for k in a if k.endswith("weight_packed"))
    kinds = {}
    for k in packed:
        kk = re.sub(r"^language_model\.model\.layers\.\d+\.", "", k)
        kk = re.sub(r"experts\.\d+\.", "experts.E.", kk)
        kinds[kk] = kinds.get(kk, 0) + 1
    textq = ca.get("text_config", {}).get("quantization_config")
    towers = [k for k in a if k.startswith(("vision_tower.", "mm_projector."))]
    untouched = [k for k in towers if k not in ref or not same_bits(a[k], ref[k])]
    # every config key but the quantization_config as the source has it
    rest_a = json.loads(json.dumps(ca))
    rest_a.pop("quantization_config", None)
    rest_s = json.loads(json.dumps(srcc))
    rest_s["text_config"].pop("quantization_config", None)
    cdiff = []
    for k in sorted(set(rest_a) | set(rest_s)):
        x, y = rest_a.get(k), rest_s.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            cdiff += [f"{k}.{j}: {x.get(j)!r} vs {y.get(j)!r}" for j in sorted(set(x) | set(y)) if x.get(j) != y.get(j)]
        elif x != y:
            cdiff.append(f"{k}: {x!r} vs {y!r}")
    verdict(not diff and qa == qb, "one_pass_equals_reference_copy",
            f"{len(a)} tensors ({len(packed)} quantized modules: {kinds}) byte-identical {not diff}, differing "
            f"{diff[:3]}; quantization_config equal {qa == qb}")
    verdict(bool(qa) and not textq and not untouched and not cdiff
            and not any(k.endswith("weight_packed") for k in towers), "output_layout",
            f"NVFP4 quantization_config at top level {'yes' if qa else 'NO'}, text_config's INT4 one "
            f"{'LEFT' if textq else 'removed'}; {len(towers)} vision tower/projector tensors, "
            f"{len(untouched)} differing from the source; other config keys differing from the source's {cdiff}; "
            f"ignore {qa.get('ignore') if qa else None}")
sys.exit(rc)

"""Mixed NVFP4A16 / FP8 weight-only / bf16 output (issue 40, item 1) against llm-compressor 0.14.
usage: t_mixed.py llmc NAME SRC OUT FP8_RE IGNORE_RE FF_DIR
         llm-compressor's data-free oneshot of SRC with two config groups: NVFP4A16 on "Linear"
         and FP8 weight-only channel-wise (QuantizationArgs(num_bits=8, type="float",
         strategy="channel", symmetric=True, dynamic=False), no input activations) on the
         targets fp4forge wrote in FF_DIR's FP8 group (exact names; a regex for a q/k unit
         without v_proj); ignore: lm_head, Gemma-4's towers, routers and per_layer
         (llmc_quantize.py's list) and re:.*IGNORE_RE. Saves OUT compressed.
         NAME_fp8_targets: the Linears compressed-tensors resolves those targets to are exactly
         the ones FP8_RE finds (re.search, as fp4forge's --fp8 regexec), derived here from the
         model, less the ignored ones.
       t_mixed.py compare NAME FF_DIR LLMC_DIR
         NAME_tensors: every tensor of both outputs has the same name, dtype, shape and bytes
         (counts by kind on the line); NAME_qconfig: quantization_config equal but for
         `version` and the order of `ignore` (compared as a set, as llmc_compare.py does;
         llm-compressor lists it in named_modules() order, fp4forge in file order).
       t_mixed.py dequant Q_DIR SRC_DIR OUT_DIR
         a bf16 copy of Q made by compressed-tensors 0.19's own decompressors
         (NaiveQuantizationCompressor for the FP8 group, NVFP4PackedCompressor for the NVFP4
         one), config without quantization_config, SRC's other files: vLLM's reference.
       t_mixed.py same_dequant NAME FF_DQ CT_DQ
         fp4forge dequantize's output equals `dequant`'s (compressed-tensors' decompression):
         the same tensor names, and each tensor's dtype, shape and bytes (FP8 modules in the
         scale's dtype, NVFP4 ones in bf16).
       t_mixed.py craft SRC OUT DTYPE
         SRC's checkpoint with every float tensor cast to DTYPE (bfloat16, float16, float32) and
         the edge rows of the notes' check crafted into every attention weight: row 0 all zero,
         row 1 [-0.0, 1e-30, -1e-30, 3e-3, -3e-3, ...], row 2 x 1e-6, row 3 x 1e4 (x 1e2 in
         float16, whose range ends at 65504).
       t_mixed.py vmake FIXTURES OUT
         OUT/{llama,gemma4_dense}/bf16: vllm_make_models.py's models (head sizes vLLM's CPU
         attention takes, a tokenizer), for vllm_mixed.py."""
import glob, json, os, re, shutil, sys

import torch
from safetensors.torch import load_file, save_file

rc = 0


def res(ok, name, msg):
    global rc
    print(f"{'PASS' if ok else 'FAIL'} {name} ({msg})", flush=True)
    rc |= not ok


def load_dir(d):
    sd = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        sd.update(load_file(f))
    return sd


def qconfig(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)["quantization_config"]


GEMMA_IGNORE = ["re:.*vision_tower.*", "re:.*audio_tower.*", "re:.*embed_vision.*", "re:.*embed_audio.*",
                "re:.*router.*", "re:.*per_layer.*"]


def llmc(name, src, out, fp8_re, ignore_re, ffd):
    import contextlib
    import transformers
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    with contextlib.redirect_stdout(sys.stderr):   # a log line llm-compressor prints as it loads
        from llmcompressor import oneshot
        from llmcompressor.modifiers.quantization import QuantizationModifier

    with open(os.path.join(src, "config.json")) as f:
        gemma = json.load(f).get("model_type") == "gemma4"
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    dtype = getattr(torch, cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16")
    cls = transformers.AutoModelForImageTextToText if gemma else transformers.AutoModelForCausalLM
    try:   # llm-compressor's log lines: stderr, so stdout holds the verdict lines only
        from loguru import logger
        logger.remove()
        logger.add(sys.stderr, level="INFO")
    except ImportError:
        pass
    m = cls.from_pretrained(src, dtype=dtype)
    ign = ["lm_head"] + (GEMMA_IGNORE if gemma else []) + [f"re:.*{ignore_re}"]

    def ignored(n):
        return any(n == p or (p.startswith("re:") and re.match(p[3:], n)) for p in ign)
    fp8_names = [n for n, mod in m.named_modules()
                 if isinstance(mod, torch.nn.Linear) and re.search(fp8_re, n) and not ignored(n)]
    from compressed_tensors.utils.match import match_named_modules
    targets = next(g["targets"] for g in qconfig(ffd)["config_groups"].values() if g["format"] == "naive-quantized")
    got = [n for n, mod in match_named_modules(m, targets, ign) if isinstance(mod, torch.nn.Linear)]
    res(sorted(got) == sorted(fp8_names) and got, f"{name}_fp8_targets",
        f"fp4forge's {len(targets)} FP8 targets resolve in compressed-tensors to {len(got)} Linears, "
        f"{len(fp8_names)} expected from the regex; differ: {sorted(set(got) ^ set(fp8_names))[:4]}")
    fp8 = QuantizationArgs(num_bits=8, type="float", strategy="channel", symmetric=True, dynamic=False)
    groups = {"group_0": preset_name_to_scheme("NVFP4A16", ["Linear"]),
              "group_1": QuantizationScheme(targets=targets, weights=fp8)}
    oneshot(model=m, recipe=QuantizationModifier(config_groups=groups, ignore=ign))
    m.save_pretrained(out, save_compressed=True)
    print(f"t_mixed llmc: {len(fp8_names)} FP8 targets -> {out}", file=sys.stderr)


def kind(k, t):
    if k.endswith(".weight") and t.dtype == torch.float8_e4m3fn:
        return "fp8_weight"
    if k.endswith(".weight_scale") and t.dtype != torch.float8_e4m3fn:
        return "fp8_scale"
    for s in ("weight_packed", "weight_scale", "weight_global_scale"):
        if k.endswith("." + s):
            return "nvfp4_" + s
    return "other"


def compare(name, ffd, lcd):
    A, B = load_dir(ffd), load_dir(lcd)
    meta = [k for k in set(A) & set(B) if A[k].dtype != B[k].dtype or A[k].shape != B[k].shape]
    bytes_diff = [k for k in sorted(set(A) & set(B)) if k not in meta
                  and not torch.equal(A[k].contiguous().view(torch.uint8), B[k].contiguous().view(torch.uint8))]
    for k in sorted(set(A) ^ set(B))[:5]:
        print(f"  only in {'fp4forge' if k in A else 'llm-compressor'}: {k}")
    for k in sorted(meta)[:5]:
        print(f"  {k}: fp4forge {A[k].dtype}{list(A[k].shape)} llmc {B[k].dtype}{list(B[k].shape)}")
    for k in bytes_diff[:5]:
        a, b = A[k].contiguous().view(torch.uint8).reshape(-1), B[k].contiguous().view(torch.uint8).reshape(-1)
        i = torch.nonzero(a != b)[:4].reshape(-1).tolist()
        print(f"  differs: {k}: {int((a != b).sum())}/{a.numel()} bytes, at {i}: fp4forge {a[i].tolist()} llmc {b[i].tolist()}")
    counts = {}
    for k, t in A.items():
        counts[kind(k, t)] = counts.get(kind(k, t), 0) + 1
    fp8_dtypes = sorted({str(A[k].dtype) for k in A if kind(k, A[k]) == "fp8_scale"})
    fp8_only = qconfig(ffd)["format"] == "naive-quantized"   # every quantized Linear FP8: one group
    ok = set(A) == set(B) and not meta and not bytes_diff and counts.get("fp8_weight", 0) > 0 \
        and (counts.get("nvfp4_weight_packed", 0) > 0) != fp8_only
    res(ok, f"{name}_tensors", f"{len(A)} tensors, {len(set(A) & set(B)) - len(meta) - len(bytes_diff)} byte-identical; "
        f"by kind {dict(sorted(counts.items()))}; FP8 scale dtype {fp8_dtypes}; only one side "
        f"{len(set(A) ^ set(B))}, dtype/shape differ {len(meta)}, bytes differ {len(bytes_diff)}")
    qa, qb = qconfig(ffd), qconfig(lcd)
    ia, ib = qa.pop("ignore"), qb.pop("ignore")
    va, vb = qa.pop("version", None), qb.pop("version", None)
    for g in sorted(set(qa.get("config_groups", {})) | set(qb.get("config_groups", {}))):
        ga, gb = qa["config_groups"].get(g), qb["config_groups"].get(g)
        if ga != gb:
            print(f"  {g}: fp4forge {json.dumps(ga)[:300]}\n  {g}: llmc     {json.dumps(gb)[:300]}")
    for k in sorted(set(qa) | set(qb)):
        if k != "config_groups" and qa.get(k) != qb.get(k):
            print(f"  {k}: fp4forge {qa.get(k)!r} llmc {qb.get(k)!r}")
    if set(ia) != set(ib):
        print(f"  ignore only fp4forge {sorted(set(ia) - set(ib))[:5]} only llmc {sorted(set(ib) - set(ia))[:5]}")
    groups = ", ".join(f"{g}: {v['format']} {len(v['targets'])} targets" for g, v in sorted(qa["config_groups"].items()))
    res(qa == qb and set(ia) == set(ib) and len(ia) == len(ib), f"{name}_qconfig",
        f"format {qa.get('format')}; {groups}; ignore {len(ia)} names equal as sets; "
        f"version fp4forge {va} llmc {vb}")


def dequant(qd, src, out):
    from compressed_tensors.compressors.naive_quantized.base import NaiveQuantizationCompressor
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme

    Q = load_dir(qd)
    qc = qconfig(qd)
    schemes = {g["format"]: QuantizationScheme(**{k: v for k, v in g.items() if k != "format"})
               for g in qc["config_groups"].values()}
    out_sd, n = {}, {"fp8": 0, "nvfp4": 0}
    for k, t in Q.items():
        if k.endswith(".weight_packed"):
            m = k[: -len(".weight_packed")]
            out_sd[m + ".weight"] = NVFP4PackedCompressor.decompress(
                {s: Q[f"{m}.{s}"] for s in ("weight_packed", "weight_scale", "weight_global_scale")},
                schemes["nvfp4-pack-quantized"])["weight"].to(torch.bfloat16)
            n["nvfp4"] += 1
        elif k.endswith(".weight") and t.dtype == torch.float8_e4m3fn:
            m = k[: -len(".weight")]
            out_sd[k] = NaiveQuantizationCompressor.decompress(
                {"weight": t, "weight_scale": Q[m + ".weight_scale"]}, schemes["naive-quantized"])["weight"]
            n["fp8"] += 1
    for k, t in Q.items():
        m = k.rsplit(".", 1)[0]
        if m + ".weight" in out_sd and k != m + ".weight":
            continue   # a quantized module's scales
        out_sd.setdefault(k, t)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    save_file({k: v.contiguous() for k, v in out_sd.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(qd, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"t_mixed dequant: {n['fp8']} FP8 and {n['nvfp4']} NVFP4 modules -> {out}", file=sys.stderr)


def same_dequant(name, ffd, ctd):
    A, B = load_dir(ffd), load_dir(ctd)
    meta = [k for k in set(A) & set(B) if A[k].dtype != B[k].dtype or A[k].shape != B[k].shape]
    differ = [k for k in sorted(set(A) & set(B)) if k not in meta
              and not torch.equal(A[k].contiguous().view(torch.uint8), B[k].contiguous().view(torch.uint8))]
    for k in sorted(set(A) ^ set(B))[:5]:
        print(f"  only in {'fp4forge' if k in A else 'compressed-tensors'}: {k}")
    for k in (meta + differ)[:5]:
        print(f"  {k}: fp4forge {A[k].dtype}{list(A[k].shape)} compressed-tensors {B[k].dtype}{list(B[k].shape)}")
    Q = load_dir(os.path.join(os.path.dirname(ffd), os.path.basename(ffd)[: -len(".ffdq")]))
    fp8 = [k for k, t in Q.items() if k.endswith(".weight") and t.dtype == torch.float8_e4m3fn]
    nv = [k for k in Q if k.endswith(".weight_packed")]
    dts = sorted({str(A[k].dtype) for k in fp8 if k in A})
    res(set(A) == set(B) and not meta and not differ and fp8, name,
        f"{len(A)} tensors, {len(set(A) & set(B)) - len(meta) - len(differ)} byte-identical; decoded {len(fp8)} FP8 "
        f"modules (to {dts}) and {len(nv)} NVFP4; only one side {len(set(A) ^ set(B))}, dtype/shape differ "
        f"{len(meta)}, bytes differ {len(differ)}")


def craft(src, out, dtype):
    dt = getattr(torch, dtype)
    sd = {k: (v.to(dt) if v.is_floating_point() else v) for k, v in load_dir(src).items()}
    big = 1e2 if dt == torch.float16 else 1e4
    for k, w in sd.items():
        if "self_attn" in k and k.endswith(".weight") and w.dim() == 2 and w.shape[0] >= 4 and w.shape[1] >= 5:
            w[0] = 0
            w[1, :5] = torch.tensor([-0.0, 1e-30, -1e-30, 3e-3, -3e-3], dtype=torch.float32).to(dt)
            w[2] = (w[2].float() * 1e-6).to(dt)
            w[3] = (w[3].float() * big).to(dt)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["dtype"] = dtype
    cfg.pop("torch_dtype", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def vmake(fixtures, out):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vllm_make_models as vm
    for name, make in (("llama", lambda d: vm.llama_like("llama", d)),
                       ("gemma4_dense", lambda d: vm.gemma4(fixtures, "dense", d))):
        d = os.path.join(out, name, "bf16")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        vm.make_tokenizer(make(d), d)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"llmc": llmc, "compare": compare, "dequant": dequant, "craft": craft, "vmake": vmake,
     "same_dequant": same_dequant}[cmd](*args)
    sys.exit(rc)

"""Tensor-by-tensor comparison of fp4forge's NVFP4A16 output with llm-compressor's.
usage: llmc_compare.py NAME FF_DIR LLMC_DIR
Prints one PASS/FAIL line per aspect, figures on the line:
  NAME_names      same tensor names, dtypes and shapes
  NAME_packed     fraction of identical weight_packed bytes (and tensors)
  NAME_scale      fraction of identical weight_scale bytes (fp8)
  NAME_gscale     fraction of identical weight_global_scale values
  NAME_other      every non-quantized tensor byte-identical, except (with --offset-norms) the
                  norms llm-compressor round-trips: its offset-norm calibration context
                  (llmcompressor/modeling/offset_norm.py, Qwen3-Next and Qwen3.5 RMSNorm
                  compute x * (1 + w)) stores 1 + w in bf16 and restores (1 + w) - 1, which
                  loses w's low bits. Such a tensor passes only when llmc's bytes equal
                  bf16(bf16(1 + w) - 1) of fp4forge's w exactly (fp4forge keeps w as given).
  NAME_ignore     quantization_config.ignore equal as sets; rest of quantization_config equal
Any difference is printed (first tensors, positions, values) so it can be explained."""
import sys, json, glob, os
import torch
from safetensors.torch import load_file

name, ffd, lcd = sys.argv[1:4]
offset_norms = "--offset-norms" in sys.argv[4:]
def load_dir(d):
    sd = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        sd.update(load_file(f))
    return sd
A, B = load_dir(ffd), load_dir(lcd)
rc = 0
def res(ok, check, msg):
    global rc
    print(f"{'PASS' if ok else 'FAIL'} {name}_{check} {msg}", flush=True)
    rc |= (not ok)

def raw(t):
    return t.contiguous().view(torch.uint8).reshape(-1)

ka, kb = set(A), set(B)
bad_meta = [k for k in ka & kb if A[k].dtype != B[k].dtype or A[k].shape != B[k].shape]
# Explained, llm-compressor's side: transformers loads some buffers in fp32 whatever the
# checkpoint's dtype (_keep_in_fp32_modules, e.g. GLM's e_score_correction_bias), and
# llm-compressor saves what it loaded. fp4forge keeps the source bytes. Equal values
# after the exact bf16 -> fp32 widening make it a dtype choice, not a different weight.
upcast = [k for k in bad_meta if A[k].shape == B[k].shape and A[k].dtype == torch.bfloat16
          and B[k].dtype == torch.float32 and torch.equal(A[k].float(), B[k])]
for k in upcast[:5]:
    print(f"  explained: {k}: llm-compressor wrote float32 (transformers keeps it in fp32), fp4forge the source's "
          f"bfloat16; values equal after widening")
bad_meta = [k for k in bad_meta if k not in upcast]
for k in sorted(ka - kb)[:5]: print(f"  only in fp4forge: {k}")
for k in sorted(kb - ka)[:5]: print(f"  only in llm-compressor: {k}")
for k in sorted(bad_meta)[:5]: print(f"  {k}: fp4forge {A[k].dtype}{list(A[k].shape)} llmc {B[k].dtype}{list(B[k].shape)}")
res(ka == kb and not bad_meta, "names",
    f"tensors fp4forge={len(ka)} llmc={len(kb)} common={len(ka & kb)} dtype/shape_mismatch={len(bad_meta)}")
common = sorted(k for k in ka & kb if k not in bad_meta and k not in upcast)

for suffix, check in ((".weight_packed", "packed"), (".weight_scale", "scale"), (".weight_global_scale", "gscale")):
    keys = [k for k in common if k.endswith(suffix)]
    tot = same = tsame = 0
    diffs = []
    for k in keys:
        a, b = raw(A[k]), raw(B[k])
        eq = (a == b)
        tot += a.numel(); same += int(eq.sum()); tsame += bool(eq.all())
        if not eq.all():
            diffs.append((k, int((~eq).sum()), a.numel()))
    frac = same / tot if tot else float("nan")
    for k, nd, n in diffs[:8]:
        print(f"  differs: {k}: {nd}/{n} bytes")
        idx = torch.nonzero(raw(A[k]) != raw(B[k]))[:4].reshape(-1)
        if check == "gscale":
            print(f"    fp4forge {A[k].tolist()} llmc {B[k].tolist()}")
        elif check == "scale":
            fa, fb = A[k].float().reshape(-1), B[k].float().reshape(-1)
            print(f"    at {idx.tolist()}: fp4forge {fa[idx].tolist()} llmc {fb[idx].tolist()}")
        else:
            print(f"    at bytes {idx.tolist()}: fp4forge {[hex(v) for v in raw(A[k])[idx].tolist()]} llmc {[hex(v) for v in raw(B[k])[idx].tolist()]}")
    res(len(keys) > 0 and same == tot, check,
        f"match_fraction={frac:.6f} bytes {same}/{tot}, identical tensors {tsame}/{len(keys)}")

others = [k for k in common if not any(k.endswith(s) for s in (".weight_packed", ".weight_scale", ".weight_global_scale"))]
odiff = [k for k in others if not torch.equal(raw(A[k]), raw(B[k]))]
def offset_round_trip(t):
    return ((t.to(torch.bfloat16) + 1).to(torch.bfloat16) - 1).to(torch.bfloat16)
explained = [k for k in odiff if offset_norms and "norm" in k and A[k].dtype == torch.bfloat16
             and torch.equal(offset_round_trip(A[k]), B[k])] if offset_norms else []
odiff = [k for k in odiff if k not in explained]
for k in odiff[:5]: print(f"  non-quantized tensor differs: {k}")
res(not odiff, "other", f"identical {len(others) - len(odiff) - len(explained)}/{len(others)} non-quantized tensors"
    + (f"; {len(explained)} norms differ only by llm-compressor's offset-norm round trip bf16(bf16(1+w)-1), "
       "fp4forge keeps the source's w" if explained else ""))

qa = json.load(open(os.path.join(ffd, "config.json")))["quantization_config"]
qb = json.load(open(os.path.join(lcd, "config.json")))["quantization_config"]
ia, ib = set(qa.pop("ignore", [])), set(qb.pop("ignore", []))
for k in sorted(ia - ib)[:5]: print(f"  ignore only in fp4forge: {k}")
for k in sorted(ib - ia)[:5]: print(f"  ignore only in llmc: {k}")
rest_diff = sorted(k for k in set(qa) | set(qb) if qa.get(k) != qb.get(k))
for k in rest_diff: print(f"  quantization_config.{k}: fp4forge {qa.get(k)!r} llmc {qb.get(k)!r}")
res(ia == ib and not rest_diff, "ignore",
    f"ignore sets fp4forge={len(ia)} llmc={len(ib)} common={len(ia & ib)}; other quantization_config keys differing: {rest_diff or 'none'}")
sys.exit(rc)

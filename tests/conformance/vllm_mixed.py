"""vLLM's CPU loader on fp4forge's mixed NVFP4A16 / FP8 weight-only output (issue 40, item 1).
usage: vllm_mixed.py WORK NAME...
Reads WORK/NAME/{bf16,q,dq}: the bf16 source, `fp4forge quantize --fp8 ...` of it, and the
bf16 copy compressed-tensors' decompressors make of q (t_mixed.py dequant). Runs vllm.LLM on
CPU through fp4forge's TEST plugin (tests/vllm: NVFP4 and, for the FP8 group, the last step of
CompressedTensorsW8A16Fp8 replaced by dequantize + vLLM's bf16 linear) with vllm_oracle.py's
prompts and settings, and prints per model:
- vllm_NAME_mixed_schemes: vLLM chose CompressedTensorsW8A16Fp8 for the FP8 layers and
  CompressedTensorsW4A4Fp4 (use_a16) for the NVFP4 ones, the plugin did only the last step of
  each, and the dequantized copy loads as plain bf16;
- vllm_NAME_mixed_equals_dequant: prompt logprobs (each position's top-5), greedy tokens, their
  logprobs and text of q equal those of dq exactly;
- vllm_NAME_mixed_vs_bf16: reported, gated on gross breakage only (as vllm_oracle.py);
- vllm_fp8_unpatched_refuses: with FP4FORGE_VLLM_CPU_NVFP4=dense (the FP8 fallback off) vLLM's
  CPU build still refuses the FP8 group: the plugin is needed, and only on CPU."""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_oracle as vo  # noqa: E402  (sets vLLM's CPU environment on import)

FP8_REFUSAL = "Failed to find a kernel that can implement the ScaledMM linear layer"


def check(work, name):
    base = os.path.join(work, name)
    prompts = vo.prompts_for(256)
    (q, cq), (dq, cdq), (bf, _) = (vo.run(os.path.join(base, k), prompts) for k in ("q", "dq", "bf16"))
    fp8, nv = cq.get("fp8-linear", 0), cq.get("nvfp4-linear", 0)
    schemes = {k: v for k, v in cq.items() if not k.startswith(("fp8-", "nvfp4-"))}
    ok = (fp8 > 0 and nv > 0 and schemes.get("CompressedTensorsW8A16Fp8", 0) == fp8
          and schemes.get("CompressedTensorsW4A4Fp4(use_a16)", 0) == nv and not cdq)
    vo.line(ok, f"vllm_{name}_mixed_schemes", f"q: vLLM schemes {schemes}, plugin dequantized {fp8} FP8 + {nv} "
            f"NVFP4 layers; dq: {'plain bf16' if not cdq else cdq}")
    mx, n, keys, tokens, text = vo.compare_exact(q, dq)
    vo.line(mx == 0 and keys and tokens and text and n > 0, f"vllm_{name}_mixed_equals_dequant",
            f"max |logprob diff| {mx:g} over {n} logprobs (prompt + top-{vo.TOPK} + {vo.MAX_TOKENS} greedy, "
            f"2 prompts); top-{vo.TOPK} sets equal: {keys}; greedy tokens equal: {tokens}; text equal: {text}")
    bmx, bmean, bn, finite = vo.prompt_tok_diff(q, bf)
    vo.line(finite and bmx <= 1.0, f"vllm_{name}_mixed_vs_bf16",
            f"reported: prompt-token logprob max |diff| {bmx:.4f} mean {bmean:.4f} over {bn}; "
            f"greedy vs bf16: {vo.first_divergence(q, bf)}")


def check_refusal(work, name):
    os.environ["FP4FORGE_VLLM_CPU_NVFP4"] = "dense"
    try:
        vo.run(os.path.join(work, name, "q"), vo.prompts_for(256))
    except Exception as e:
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        vo.line(FP8_REFUSAL in msg, "vllm_fp8_unpatched_refuses", f"{name} with the FP8 fallback off: {msg}")
        return
    finally:
        os.environ["FP4FORGE_VLLM_CPU_NVFP4"] = "1"
    vo.line(False, "vllm_fp8_unpatched_refuses", f"{name} LOADED with the FP8 fallback off: vLLM's CPU build "
            "gained an FP8 weight-only kernel? review tests/vllm's plugin and this test")


def main():
    work, names = sys.argv[1], sys.argv[2:]
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    import fp4forge_vllm_cpu_nvfp4  # noqa: F401  (tests/vllm/install_plugin.sh)
    for name in names:
        vo.guarded(f"vllm_{name}_mixed", lambda: check(work, name))
    vo.guarded("vllm_fp8_unpatched_refuses", lambda: check_refusal(work, names[0]))
    return vo.rc


if __name__ == "__main__":
    sys.exit(main())

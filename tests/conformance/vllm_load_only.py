"""vLLM 0.32's own loader on fp4forge's NVFP4A16 output of a family whose forward vLLM's CPU
build cannot run: DeepSeek-V3.2 / GLM-5 (sparse attention has no CPU backend) and
MiniMax-M2 (vLLM's CPU router, fused_moe/router/cpu_router.py, asserts softmax scoring
unless top-k is grouped; MiniMax-M2 routes by sigmoid with a correction bias, ungrouped).
usage: vllm_load_only.py NAME Q_DIR REFUSAL   (the vLLM venv's python, the test plugin installed)
Each step runs vllm.LLM in a child process (a failed engine leaves vLLM's process state
unusable):
1. NAME_vllm_cpu_refuses: vllm.LLM on Q_DIR as it is (and one generate) stops, and the error
   it stops with contains REFUSAL (vLLM's own words; a FAIL means vLLM changed: look, update).
2. NAME_vllm_loader_accepts: the sparse-attention refusal (platforms/cpu.py,
   get_attn_backend_cls) answered with vLLM's CPU MLA backend, the only change: vllm.LLM
   builds the model with the checkpoint's quantization_config and loads Q_DIR through
   vLLM's DefaultModelLoader and the model's own load_weights (name mapping, fused q/k/v,
   q_a/kv_a, indexer wk/weights_proj, expert mapping). That loader raises "Following weights
   were not initialized from checkpoint" for a parameter the checkpoint left unset and
   load_weights raises on a name it cannot place: reaching "Loading weights took" with
   neither is the verdict. How vLLM's run ends after loading is reported, not judged."""
import os, subprocess, sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

if len(sys.argv) > 3 and sys.argv[1] == "--child":
    mode, path = sys.argv[2:4]
    if mode == "answered":
        from vllm.platforms.cpu import CpuPlatform
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
        original = CpuPlatform.get_attn_backend_cls.__func__

        def answered(cls, selected_backend, attn_selector_config, num_heads=None):
            try:
                return original(cls, selected_backend, attn_selector_config, num_heads)
            except NotImplementedError:
                return AttentionBackendEnum.CPU_MLA.get_path()
        CpuPlatform.get_attn_backend_cls = classmethod(answered)
    from vllm import LLM
    try:
        from vllm import SamplingParams
        llm = LLM(model=path, dtype="bfloat16", enforce_eager=True, max_model_len=64, max_num_seqs=1,
                  skip_tokenizer_init=True)
        llm.generate([{"prompt_token_ids": [1, 5, 9, 33]}], SamplingParams(max_tokens=2, detokenize=False))
        print("CHILD ran", flush=True)
    except BaseException as exc:
        import traceback
        where = traceback.extract_tb(exc.__traceback__)[-1]
        print(f"CHILD {type(exc).__name__}: {str(exc)[:240]} ({os.path.basename(where.filename)}:{where.lineno})",
              flush=True)
    sys.exit(0)

name, qdir, refusal = sys.argv[1:4]
rc = 0


def child(mode):
    r = subprocess.run([sys.executable, __file__, "--child", mode, qdir], capture_output=True, text=True, timeout=900)
    ends = [l[6:] for l in r.stdout.splitlines() if l.startswith("CHILD ")]
    return r.stdout + r.stderr, ends[0] if ends else f"no report (exit {r.returncode})"


log, end = child("as-is")
ok = refusal in end
print(f"{'PASS' if ok else 'FAIL'} {name}_vllm_cpu_refuses (vllm.LLM on vLLM's CPU build: {end})", flush=True)
rc |= not ok
log, end = child("answered")
loaded = [l.split("]")[-1].strip() for l in log.splitlines() if "Loading weights took" in l]
unset = "were not initialized from checkpoint" in log
ok = bool(loaded) and not unset
print(f"{'PASS' if ok else 'FAIL'} {name}_vllm_loader_accepts (vLLM's DefaultModelLoader + load_weights "
      + (f"set every parameter from the checkpoint: {loaded[0]}" if ok else "did not finish") + f"; then: {end})",
      flush=True)
rc |= not ok
sys.exit(rc)

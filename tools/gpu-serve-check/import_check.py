"""Imports what an offline vLLM run of the checked models needs, one module at a time, and
prints one line each (ok / the error), then torch's CUDA facts. Exit 0 only when every module
imported. usage: import_check.py [--no-ext]
--no-ext: vLLM's large CUDA extensions are not in place yet (call 1): only Python-level
imports are judged; an ImportError naming vllm._C / _moe_C / _vllm_fa3_C is reported, not
counted."""
import importlib, sys, traceback

MODULES = [
    "vllm", "vllm.entrypoints.llm", "vllm.inputs", "vllm.sampling_params",
    "vllm.v1.engine.llm_engine", "vllm.v1.engine.core", "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.models.gemma4", "vllm.model_executor.models.gemma4_mm",
    "vllm.model_executor.models.llama",
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors",
    "vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_w4a4_nvfp4",
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w4a4_nvfp4",
    "vllm.model_executor.kernels.linear",
    "vllm.v1.attention.backends.triton_attn", "vllm.v1.attention.backends.flash_attn",
    "compressed_tensors", "xgrammar", "llguidance", "outlines_core", "msgspec", "zmq",
    "openai", "pydantic", "mistral_common", "cbor2", "blake3", "depyf",
]
EXT = ("vllm._C", "_moe_C", "_vllm_fa3_C", "_C_stable_libtorch")


def main():
    no_ext = "--no-ext" in sys.argv
    bad = 0
    for m in MODULES:
        try:
            importlib.import_module(m)
            print(f"ok   {m}", flush=True)
        except BaseException as e:  # noqa: BLE001 (SystemExit from a bad import counts too)
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            ext = no_ext and any(x in msg for x in EXT)
            print(f"{'ext ' if ext else 'FAIL'} {m}: {msg}", flush=True)
            if not ext:
                bad += 1
                traceback.print_exc(limit=-3)
    import torch
    print(f"torch {torch.__version__} cuda {torch.version.cuda} available {torch.cuda.is_available()}")
    if torch.cuda.is_available():
        print(f"device {torch.cuda.get_device_name(0)} capability {torch.cuda.get_device_capability(0)}")
    try:
        import vllm
        print(f"vllm {vllm.__version__} from {vllm.__file__}")
    except BaseException as e:  # noqa: BLE001
        print(f"vllm version: {e!r}")
    print(f"import_check: {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

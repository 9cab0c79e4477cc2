"""Rewrites a wheel without files an offline H200 vLLM run never loads, so that the wheel set
fits in fewer 64 MiB carries. usage: trim_wheels.py IN.whl OUT_DIR [BIG_DIR]
Writes OUT_DIR/<same name>.whl. With BIG_DIR, vLLM's three large CUDA extensions are also
taken out of the wheel and written, gzip'd, as BIG_DIR/<path with '/' as '+'>.gz: the wheel
then installs and imports on its own (call 1 checks every Python import that way) and
device_run.sh drops the extensions into the installed tree once their parts have arrived.
- vllm: drops FA2 (_vllm_fa2_C, sm80 flash-attention: on Hopper vLLM uses FA3 or Triton and
  the import is guarded, FA2_AVAILABLE=False), the vllm-rs binary (Rust front-end), the C++
  headers and other-CPython builds under third_party (DeepGEMM / SM100 FMHA JIT sources) and
  the swagger UI bundle of the HTTP server.
- mistral_common: drops data/ (Tekken tokenizer files for Mistral models only).
- pycountry: drops locales/ (translations; gettext falls back to English).
RECORD is rewritten to list what is left (the split-out extensions stay listed: they are
put back in place before use). Other wheels are copied unchanged."""
import gzip, os, shutil, sys, zipfile

RULES = {
    "vllm": ({"vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs"},
             ("vllm/third_party/deep_gemm/include/", "vllm/third_party/fmha_sm100/cutlass/",
              "vllm/entrypoints/serve/instrumentator/static/")),
    "mistral_common": (set(), ("mistral_common/data/",)),
    "pycountry": (set(), ("pycountry/locales/",)),
}
# big CUDA extensions carried outside the wheel (each of them alone is most of a carry)
BIG = ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so",
       "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")


def main(src, out_dir, big_dir=None):
    dst = os.path.join(out_dir, os.path.basename(src))
    dist = os.path.basename(src).split("-")[0]
    if dist not in RULES:
        shutil.copyfile(src, dst)
        return
    exact, prefix = RULES[dist]

    def dropped(name):
        if name in exact or name.startswith(prefix):
            return True
        # DeepGEMM ships one extension per CPython; the H200 image runs 3.12
        return name.startswith("vllm/third_party/deep_gemm/_C.cpython-") and "-312-" not in name

    zin = zipfile.ZipFile(src)
    record, gone, split = None, 0, 0
    with zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename.endswith(".dist-info/RECORD"):
                record = info
            elif dropped(info.filename):
                gone += info.compress_size
            elif big_dir and info.filename in BIG:
                with gzip.open(os.path.join(big_dir, info.filename.replace("/", "+") + ".gz"),
                               "wb", compresslevel=6) as g:
                    g.write(zin.read(info))
                split += info.compress_size
            else:
                zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_DEFLATED,
                              compresslevel=6)
        lines = [l for l in zin.read(record).decode().splitlines()
                 if l and not dropped(l.rsplit(",", 2)[0])]
        zout.writestr(record, "\n".join(lines) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    print(f"{dist}: dropped {gone/1e6:.1f} MB compressed, split out {split/1e6:.1f} MB")


if __name__ == "__main__":
    main(*sys.argv[1:])

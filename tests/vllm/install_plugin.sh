#!/usr/bin/env bash
# Installs (idempotently) fp4forge's TEST-ONLY vLLM plugin (tests/vllm/fp4forge_vllm_cpu_nvfp4,
# a vllm.general_plugins entry point) into the vLLM CPU venv made by tests/probe/setup_vllm.sh.
# Usage: install_plugin.sh VENV. Reinstalls only when the plugin's sources changed (a stamp
# named by their hash); builds from a temporary copy so the work tree gets no build/ or
# egg-info; offline (--no-index, --no-build-isolation: the venv's own setuptools).
set -euo pipefail
VENV=$1
SRC="$(cd "$(dirname "$0")" && pwd)/fp4forge_vllm_cpu_nvfp4"
HASH=$(cd "$SRC" && cat pyproject.toml fp4forge_vllm_cpu_nvfp4/*.py | sha256sum | cut -c1-16)
STAMP="$VENV/.fp4forge-vllm-plugin-$HASH"
has_entry_point() {
    "$VENV/bin/python" - <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import entry_points
sys.exit(0 if any(e.name == "fp4forge_cpu_nvfp4" for e in entry_points(group="vllm.general_plugins")) else 1)
PYEOF
}
# the venv's lock (setup_vllm.sh's): one pip at a time in it
exec 9> "$VENV.lock"
flock 9
if [ -f "$STAMP" ] && has_entry_point; then exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$SRC" "$TMP/pkg"
rm -f "$VENV"/.fp4forge-vllm-plugin-*
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --no-index --force-reinstall \
    "$TMP/pkg" >&2
has_entry_point || { echo "install_plugin.sh: entry point not visible after install" >&2; exit 1; }
touch "$STAMP"

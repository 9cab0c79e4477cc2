#!/usr/bin/env bash
# Builds (once) the Python venv that holds the oracle: the real peers fp4forge is judged
# against. Versions are pinned to a set llm-compressor itself accepts, so the three peers
# agree with each other and a fresh machine gets the same oracle as the last one.
set -euo pipefail
VENV=${FP4FORGE_VENV:-/var/tmp/fp4forge-venv}
STAMP="$VENV/.fp4forge-oracle-v1"
if [ -f "$STAMP" ]; then echo "$VENV"; exit 0; fi
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
"$VENV/bin/python" -m pip install -q --progress-bar off \
    torch==2.11.0 transformers==5.17.0 compressed-tensors==0.19.0 \
    llmcompressor==0.14.0.1 safetensors peft numpy >&2
touch "$STAMP"
echo "$VENV"

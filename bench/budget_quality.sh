#!/usr/bin/env bash
# What a weight budget buys on the real trained model (issue 40, item 3): SmolLM2-135M-Instruct
# (tests/conformance/real_model.sh) quantized with `--budget` at all-NVFP4A16 + 5, 15, 30 and
# 40% bytes, and each single module class kept in bf16 (or written FP8) by hand beside a budget
# of exactly its bytes; each scored by transformers + compressed-tensors on the first 2,048
# tokens of LICENSE (real_model.py ppl: perplexity and KL(bf16 || q) a token).
# usage: bench/budget_quality.sh [--python VENV_PYTHON]   (default: the conformance venv's)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${2:-}
[ "${1:-}" = --python ] || PY=$(bash tests/conformance/setup_venv.sh)/bin/python
make -s build/fp4forge
FF=build/fp4forge
SRC=$(bash tests/conformance/real_model.sh "$PY" | tail -1)
D=${BENCH_DIR:-build/bench-budget}; rm -rf "$D"; mkdir -p "$D"
q() { local out=$1; shift; $FF quantize "$SRC" "$D/$out" --no-doctor --quiet "$@" > "$D/$out.log"; }
bytes() { $FF plan "$SRC" --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_out"])'; }

floor=$(bytes)
q nvfp4
dirs=("$D/nvfp4")
for pct in 5 15 30 40; do
    q budget+$pct --budget $((floor * (100 + pct) / 100))
    dirs+=("$D/budget+$pct")
done
# single module classes by hand, and the budget of the same bytes
classes=("attn-bf16:--ignore self_attn --allow-partial" "down-bf16:--ignore down_proj --allow-partial"
         "qkv-bf16:--ignore self_attn\.[qkv]_proj --allow-partial" "attn-fp8:--fp8 self_attn"
         "down-fp8:--fp8 down_proj" "gateup-fp8:--fp8 (gate|up)_proj")
for c in "${classes[@]}"; do
    name=${c%%:*}; read -r -a args <<< "${c#*:}"
    q "$name" "${args[@]}"
    b=$(bytes "${args[@]}")
    q "budget=$name" --budget "$b"
    dirs+=("$D/$name" "$D/budget=$name")
done
# tensor bytes of each output (the budget's measure), against all-NVFP4A16's
python3 - "$floor" "${dirs[@]}" <<'EOF' | tee "$D/sizes.txt"
import glob, json, os, struct, sys
floor = int(sys.argv[1])
for d in sys.argv[2:]:
    n = 0
    for f in glob.glob(d + "/*.safetensors"):
        with open(f, "rb") as fh:
            h = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        n += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k != "__metadata__")
    print(f"{os.path.basename(d):22s} {n:>11d} bytes ({100 * (n / floor - 1):+.1f}%)")
EOF
echo "SmolLM2-135M-Instruct by weight budget (LICENSE, 2,048 tokens):"
"$PY" tests/conformance/real_model.py ppl LICENSE "$SRC" "${dirs[@]}" 2> "$D/ppl.err"

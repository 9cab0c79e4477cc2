#!/usr/bin/env bash
# Observers (issue 16): what the MSE grid searches cost, fp4forge against
# llm-compressor 0.14 (oneshot NVFP4A16 on CPU, conformance venv), on the same
# checkpoint in one run. Each tool runs min/max and then each search observer;
# the observer's cost is its wall time minus the same tool's min/max run (load,
# save and everything else are in both), so the ratio compares the searches.
# usage: bench/observers.sh [--dir DIR]   (a synthetic Gemma-4 dense, ~30 MB bf16)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=/var/tmp/fp4forge-bench-obs
[ "${1:-}" = --dir ] && DIR=$2
PY=${FP4FORGE_PY:-/var/tmp/fp4forge-venv/bin/python}
FF=${FP4FORGE_BIN:-$PWD/build/fp4forge}
[ -n "${FP4FORGE_BIN:-}" ] || make -s build/fp4forge > /dev/null
rm -rf "$DIR"; mkdir -p "$DIR"
"$FF" synth --arch gemma4-dense "$DIR/src" > /dev/null
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'; }
ff() { rm -rf "$DIR/ff"; "$FF" quantize "$DIR/src" "$DIR/ff" --no-doctor --quiet --observer "$1"; }
llmc() { rm -rf "$DIR/llmc"; "$PY" tests/conformance/llmc_quantize_observer.py "$DIR/src" "$DIR/llmc" "$1"; }
f_mm=$(secs ff minmax); f_mse=$(secs ff mse); f_ex=$(secs ff expanded-mse)
# bytes the observers search: the quantized Linears' bf16 weights (verify's per-tensor count)
qbytes=$("$FF" verify "$DIR/ff" --against "$DIR/src" --json | "$PY" -c \
    'import json,sys; print(2 * sum(t["numel"] for t in json.load(sys.stdin)["tensors"]))')
l_mm=$(secs llmc memoryless_minmax); l_mse=$(secs llmc memoryless_mse); l_ex=$(secs llmc nvfp4_expanded_mse)
awk -v b="$qbytes" -v fm="$f_mm" -v fs="$f_mse" -v fe="$f_ex" -v lm="$l_mm" -v ls="$l_mse" -v le="$l_ex" 'BEGIN{
    printf "observers on a synthetic Gemma-4 dense, %.1f MB searched (wall s; search = observer run - min/max run)\n", b / 1e6
    printf "%-28s %10s %10s %14s\n", "", "fp4forge", "llm-comp.", "search ratio"
    printf "%-28s %10.2f %10.2f\n", "min/max (whole run)", fm, lm
    d1 = fs - fm; d2 = ls - lm; if (d1 < 0.01) d1 = 0.01
    printf "%-28s %10.2f %10.2f %13.1fx   (%.3f vs %.4f GB/s)\n", "mse", fs, ls, d2 / d1, b / 1e9 / d1, b / 1e9 / (d2 > 0 ? d2 : 1e-9)
    d1 = fe - fm; d2 = le - lm; if (d1 < 0.01) d1 = 0.01
    printf "%-28s %10.2f %10.2f %13.1fx   (%.3f vs %.4f GB/s)\n", "expanded-mse", fe, le, d2 / d1, b / 1e9 / d1, b / 1e9 / (d2 > 0 ? d2 : 1e-9) }'

#!/usr/bin/env bash
# LoRA (issue 38, item 4): `fp4forge merge` and `fp4forge quantize --lora` against
# peft's merge_and_unload on the same adapter, the way users run it (load the bf16
# base in transformers, PeftModel.from_pretrained, merge, save_pretrained), at two
# sizes of the real Gemma-4 31B layer geometry (synth --size real --vocab 16384,
# 1 and 2 text layers, its vision tower): wall time (best of --runs, page-cached,
# outputs removed and synced outside the timing) and peak RSS. The adapter is
# peft's own: rank 16 on every text attention and MLP Linear, random A and B.
# That the merges agree is tests/conformance/t_lora.sh's job (to bf16 rounding:
# fp4forge adds B @ A in f32 and rounds once), not this script's.
#
# usage: bench/lora.sh [--dir DIR] [--runs N] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=/var/tmp/fp4forge-bench-lora RUNS=2 THREADS=
while [ $# -gt 0 ]; do
    case "$1" in
    --dir) DIR=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench/lora.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
PY=${FP4FORGE_PY:-/var/tmp/fp4forge-venv/bin/python}
FF=${FP4FORGE_BIN:-$PWD/build/fp4forge}
[ -n "${FP4FORGE_BIN:-}" ] || make -s build/fp4forge > /dev/null
T=(); [ -n "$THREADS" ] && T=(--threads "$THREADS")
mkdir -p "$DIR"
OUT=$DIR/out
# run CMD...: "seconds peakKB" of one run, the previous output removed first
run() { rm -rf "$OUT"; sync; /usr/bin/time -f "%e %M" "$@" 2>&1 > /dev/null | tail -1; }
# best CMD...: the best of RUNS runs' seconds, and the largest peak RSS in MB
best() {
    local i; for i in $(seq "$RUNS"); do run "$@"; done |
        awk 'NR == 1 || $1 < t {t = $1} $2 > m {m = $2} END {printf "%.2f %d\n", t, m / 1024}'
}
echo "LoRA merge on the real Gemma-4 31B layer geometry (16k vocabulary), rank 16 on every text Linear;"
echo "page-cached, best of $RUNS; threads: ${THREADS:-all}"
printf "%-8s %7s %-34s %9s %9s %9s\n" layers GB command "wall s" "peak MB" "vs peft"
for L in 1 2; do
    base=$DIR/base-L$L ad=$DIR/adapter-L$L
    [ -f "$base/.complete" ] || { "$FF" synth --arch gemma4-dense --size real --layers "$L" --vocab 16384 --force "$base" > /dev/null && touch "$base/.complete"; }
    [ -f "$ad/adapter_config.json" ] || "$PY" bench/lora_peft.py make "$base" "$ad" 2> "$DIR/make.err" || { tail -3 "$DIR/make.err"; exit 1; }
    gb=$(cat "$base"/*.safetensors | wc -c | awk '{printf "%.2f", $1 / 1e9}')
    cat "$base"/*.safetensors > /dev/null
    read -r tp mp < <(best "$PY" bench/lora_peft.py merge "$base" "$ad" "$OUT")
    read -r tm mm < <(best "$FF" merge "$base" "$ad" "$OUT" --force)
    read -r tq mq < <(best "$FF" quantize "$base" "$OUT" --lora "$ad" --no-doctor --quiet --force "${T[@]}")
    for row in "peft merge_and_unload + save|$tp|$mp" "fp4forge merge|$tm|$mm" "fp4forge quantize --lora|$tq|$mq"; do
        IFS='|' read -r name t m <<< "$row"
        awk -v L="$L" -v g="$gb" -v n="$name" -v t="$t" -v m="$m" -v p="$tp" 'BEGIN{
            printf "%-8s %7s %-34s %9.2f %9d %8.1fx\n", L, g, n, t, m, p / t }'
    done
done
rm -rf "$OUT"

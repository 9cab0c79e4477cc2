#!/usr/bin/env bash
# FP8-block sources (issue 15): fp4forge quantizing a DeepSeek-V3-geometry
# FP8 checkpoint (synth --arch deepseek-v3 --size real --source fp8-block, a few
# layers, 8 experts) in one pass, against a plain read of the same files, and its
# peak RSS at two sizes (memory must not grow with the model). Page-cached, best
# of two. usage: bench/fp8_source.sh [--layers N (>= 5, default 6)] [--dir DIR] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/.."
L=6 DIR=/var/tmp/fp4forge-bench-fp8 THREADS=
while [ $# -gt 0 ]; do
    case "$1" in
    --layers) L=$2; shift ;; --dir) DIR=$2; shift ;; --threads) THREADS=$2; shift ;;
    *) echo "bench/fp8_source.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
FF=${FP4FORGE_BIN:-$PWD/build/fp4forge}
[ -n "${FP4FORGE_BIN:-}" ] || make -s build/fp4forge > /dev/null
mkdir -p "$DIR"
synth() {   # synth LAYERS -> the checkpoint dir (reused when present)
    local d="$DIR/ds-L$1"
    if [ ! -f "$d/.complete" ]; then
        # the real layer geometry (hidden 7168, MLA, 2048-wide experts); 8 experts
        # and a 16k vocabulary keep a layer near 0.6 GB, as bench/run does for Gemma-4
        "$FF" synth --arch deepseek-v3 --size real --layers "$1" --experts 8 --vocab 16384 \
            --source fp8-block "$d" --force > /dev/null
        touch "$d/.complete"
    fi
    echo "$d"
}
best() { sort -n | head -1; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'; }
T=(); [ -n "$THREADS" ] && T=(--threads "$THREADS")
quant() { rm -rf "$DIR/out"; "$FF" quantize "$1" "$DIR/out" "${T[@]}" --no-doctor --quiet --force || echo "quantize failed" >&2; }
rss() { rm -rf "$DIR/out"; /usr/bin/time -f %M "$FF" quantize "$1" "$DIR/out" "${T[@]}" --no-doctor --quiet --force 2>&1 > /dev/null | tail -1; }
# DeepSeek-V3's first 3 layers are dense: the small size has 4 (one MoE layer)
[ "$L" -ge 5 ] || { echo "bench/fp8_source.sh: --layers must be >= 5" >&2; exit 2; }
SMALL=$(synth 4); BIG=$(synth "$L")
bytes=$(cat "$BIG"/*.safetensors | wc -c)
tc=$( (secs cat "$BIG"/*.safetensors; secs cat "$BIG"/*.safetensors) | best)
tq=$( (secs quant "$BIG"; secs quant "$BIG") | best)
awk -v b="$bytes" -v c="$tc" -v q="$tq" 'BEGIN{
    printf "FP8-block source: %.2f GB (DeepSeek-V3 geometry, 8 experts)\n", b / 1e9
    printf "cat > /dev/null            %6.2f GB/s\n", b / 1e9 / c
    printf "fp4forge quantize (1 pass) %6.2f GB/s of FP8 source\n", b / 1e9 / q
    printf "fp4forge / cat             %6.2f x\n", c / q }'
echo "peak RSS: $(( $(rss "$SMALL") / 1024 )) MB at $(( $(cat "$SMALL"/*.safetensors | wc -c) / 1000000 )) MB, $(( $(rss "$BIG") / 1024 )) MB at $(( bytes / 1000000 )) MB"
rm -rf "$DIR/out"

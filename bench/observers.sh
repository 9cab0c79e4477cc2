#!/usr/bin/env bash
# Observers (issues 16 and 38): what the MSE grid searches cost.
#
# Default: fp4forge against llm-compressor 0.14 (oneshot NVFP4A16 on CPU,
# conformance venv) on one tiny synthetic Gemma-4 dense in one run. Each tool
# runs min/max and then each search observer; the observer's cost is its wall
# time minus the same tool's min/max run (load, save and everything else are
# in both), so the ratio compares the searches.
#
# --real: fp4forge alone at the real 31B-dense layer geometry (synth --size
# real --layers 2 --vision-layers 0: 4.8 GB, 2.03 GB of bf16 Linears; the
# llm-compressor side would take days), best of --runs per observer, GB/s =
# bf16 bytes of the quantized Linears / (observer run - min/max run). --bin
# OTHER times a second binary the same way, interleaved (a build from before a
# change), and checks that both write byte-identical files.
#
# usage: bench/observers.sh [--dir DIR]
#        bench/observers.sh --real [--dir DIR] [--runs N] [--threads T] [--bin OTHER]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=/var/tmp/fp4forge-bench-obs REAL=0 RUNS=3 THREADS=2 OTHER=
while [ $# -gt 0 ]; do
    case $1 in
    --dir) DIR=$2; shift 2 ;;
    --real) REAL=1; shift ;;
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --bin) OTHER=$2; shift 2 ;;
    *) echo "usage: bench/observers.sh [--real] [--dir DIR] [--runs N] [--threads T] [--bin OTHER]" >&2; exit 2 ;;
    esac
done
PY=${FP4FORGE_PY:-/var/tmp/fp4forge-venv/bin/python}
FF=${FP4FORGE_BIN:-$PWD/build/fp4forge}
[ -n "${FP4FORGE_BIN:-}" ] || make -s build/fp4forge > /dev/null
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'; }

if [ "$REAL" = 1 ]; then
    mkdir -p "$DIR"
    [ -f "$DIR/real/config.json" ] ||
        "$FF" synth --arch gemma4-dense --size real --layers 2 --vision-layers 0 --force "$DIR/real" > /dev/null
    # the quantized Linears' bf16 bytes: plan's families that are quantized whole
    qbytes=$("$FF" plan --json "$DIR/real" | python3 -c 'import json,sys
print(sum(f["bytes_in"] for f in json.load(sys.stdin)["families"] if f["quantized"] and not f["kept"]))')
    run() {   # BIN OBSERVER OUT
        rm -rf "$3"
        secs "$1" quantize "$DIR/real" "$3" --no-doctor --quiet --threads "$THREADS" --observer "$2"
    }
    bins=("$FF"); [ -n "$OTHER" ] && bins+=("$OTHER")
    declare -A best same
    for ((r = 0; r < RUNS; r++)); do
        for ob in minmax mse expanded-mse; do
            # turns: the binary after another pays for the memory its output freed
            # (docs/bench.md, "This VM's memory"), so each goes first every other round
            order=("${!bins[@]}"); [ $((r % 2)) = 1 ] && order=($(printf '%s\n' "${order[@]}" | sort -rn))
            for b in "${order[@]}"; do
                t=$(run "${bins[$b]}" $ob "$DIR/out-$b")
                best[$b,$ob]=$(awk -v a="${best[$b,$ob]:-}" -v t="$t" 'BEGIN{print (a == "" || t < a) ? t : a}')
            done
            # two outputs of a real-size run are 7 GB: compared as they come, then dropped
            if [ -n "$OTHER" ] && [ $r = 0 ]; then
                same[$ob]=$(bash tests/same_output.sh "$DIR/out-0" "$DIR/out-1" || true)
            fi
            rm -rf "$DIR/out-0" "$DIR/out-1"
        done
    done
    printf 'observers at the real Gemma-4 31B layer geometry, %.2f GB of bf16 Linears searched, %s threads, best of %s\n' \
        "$(awk -v b="$qbytes" 'BEGIN{print b / 1e9}')" "$THREADS" "$RUNS"
    for b in "${!bins[@]}"; do
        echo "${bins[$b]}"
        for ob in minmax mse expanded-mse; do
            awk -v ob=$ob -v t="${best[$b,$ob]}" -v m="${best[$b,minmax]}" -v q="$qbytes" 'BEGIN{
                if (ob == "minmax") { printf "  %-14s %8.2f s\n", ob, t; exit }
                d = t - m; if (d < 0.01) d = 0.01
                printf "  %-14s %8.2f s   search %7.2f s   %.3f GB/s\n", ob, t, d, q / 1e9 / d }'
        done
    done
    if [ -n "$OTHER" ]; then
        for ob in minmax mse expanded-mse; do
            [ -z "${same[$ob]}" ] && echo "$ob: the two binaries' files are identical" || echo "$ob: DIFFER: ${same[$ob]}"
        done
    fi
    exit 0
fi

rm -rf "$DIR"; mkdir -p "$DIR"
"$FF" synth --arch gemma4-dense "$DIR/src" > /dev/null
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

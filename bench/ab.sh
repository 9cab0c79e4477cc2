#!/usr/bin/env bash
# Whole-job A/B: `fp4forge quantize` of one page-cached checkpoint by several
# binaries, alternating, at several thread counts, each round next to a `cat`
# of the same files. These machines are shared and noisy: only figures from the
# same loop are compared (docs/bench.md).
# usage: bench/ab.sh [--rounds N] [--threads "16 8 2"] [--out DIR] MODEL BIN [BIN...]
set -u -o pipefail
rounds=2 threads="$(nproc)" out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: bench/ab.sh [--rounds N] [--threads LIST] [--out DIR] MODEL BIN [BIN...]" >&2; exit 2; }
model=$1; shift
[ -n "$out" ] || out=$(mktemp -d)/out
ls "$model"/*.safetensors > /dev/null || exit 1
cat "$model"/*.safetensors > /dev/null

# time_child LABEL CMD...: wall, user and sys seconds of one child process
time_child() {
    python3 - "$@" <<'PY'
import resource, subprocess, sys, time
label, cmd = sys.argv[1], sys.argv[2:]
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.monotonic()
rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
t1 = time.monotonic()
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%-28s %.3f s  user %.2f  sys %.2f  rc=%d" % (label, t1 - t0, r1.ru_utime - r0.ru_utime,
                                                   r1.ru_stime - r0.ru_stime, rc))
sys.exit(rc)
PY
}

status=0
for r in $(seq "$rounds"); do
    echo "round $r"
    time_child "cat" sh -c "cat '$model'/*.safetensors > /dev/null"
    for bin in "$@"; do
        for t in $threads; do
            rm -rf "$out"
            time_child "$(basename "$bin") --threads $t" "$bin" quantize "$model" "$out" --quiet --no-doctor \
                --threads "$t" || status=1
        done
    done
done
rm -rf "$out"
exit $status

#!/usr/bin/env bash
# Whole-job A/B: `fp4forge quantize` of one page-cached checkpoint by several
# binaries, alternating, at several thread counts, each round next to a `cat`
# of the same files. These machines are shared and noisy: only figures from the
# same loop are compared (docs/bench.md). Then the output written alone, and
# read and written at once (the floors of a job on two CPUs), as many rounds;
# ends with each one's medians.
# usage: bench/ab.sh [--rounds N] [--threads "16 8 2"] [--out DIR] MODEL BIN [BIN...]
set -u -o pipefail
rounds=2 threads="$(nproc)" out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
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

# medians: each label's median wall, user and sys, and the median cat's wall over it
medians() {
    python3 -c '
import re, statistics, sys
runs = {}
for line in sys.stdin:
    m = re.match(r"(.+?)\s+([0-9.]+) s  user ([0-9.]+)  sys ([0-9.]+)", line)
    if m:
        runs.setdefault(m.group(1), []).append([float(x) for x in m.groups()[1:]])
cat = statistics.median(r[0] for r in runs.get("cat", [[0]]))
print("medians of %d rounds" % len(runs.get("cat", [])))
for label, rs in runs.items():
    wall, user, sys_ = (statistics.median(r[i] for r in rs) for i in range(3))
    print("%-28s %.3f s  user %.2f  sys %.2f  cat/wall %.3fx" % (label, wall, user, sys_, cat / wall))
'
}

status=0
log=$(mktemp)
# timed LABEL CMD...: time_child's line, shown and kept for the medians
timed() {
    local line rc
    line=$(time_child "$@")
    rc=$?
    echo "$line" | tee -a "$log"
    return $rc
}
# One untimed run of each binary first. On a VM whose free memory goes back
# to the host (virtio-balloon free page reporting), memory the job has not
# touched lately costs the host's faults: a 2.5 GB write after a minute idle
# took 6 s of system time, 0.3-0.4 s right after another, so a first round
# would time the host instead of the binary.
for bin in "$@"; do
    rm -rf "$out"
    "$bin" quantize "$model" "$out" --quiet --no-doctor --threads "${threads%% *}" > /dev/null || status=1
done
out_bytes=$(cat "$out"/*.safetensors 2> /dev/null | wc -c)
# every round's read of the input, timed alone and beside the output's write
read_in="cat '$model'/*.safetensors > /dev/null"
# The binaries take turns going first in a round.
bins=("$@")
for r in $(seq "$rounds"); do
    echo "round $r"
    timed "cat" sh -c "$read_in"
    k=$(( (r - 1) % ${#bins[@]} ))
    for bin in "${bins[@]:k}" "${bins[@]:0:k}"; do
        for t in $threads; do
            rm -rf "$out"
            timed "$(basename "$bin") --threads $t" "$bin" quantize "$model" "$out" --quiet --no-doctor \
                --threads "$t" || status=1
        done
    done
done
# Then the output's bytes written alone, as many times (its whole MBs of
# zeros into a file allocated first, as the shards are): the floor of a job
# that writes them. Not inside the rounds: the binary after it paid for the
# memory it freed (INT4 synth: 1.687 s against 1.112 s for two builds that
# were within 2% of each other when they took turns).
rm -rf "$out"
scratch="$out.write-alone"
# The last round's file is removed before the clock starts: dropping 2.5 GB of
# page cache is not the write's cost (rm of a 2.5 GB file: 0.14-0.16 s on this VM).
write_out="fallocate -l $out_bytes '$scratch' &&
    dd if=/dev/zero of='$scratch' bs=1M count=$((out_bytes >> 20)) conv=notrunc status=none"
for r in $(seq "$rounds"); do
    rm -f "$scratch"
    timed "write output alone" sh -c "$write_out"
done
# The input read and the output written at once, by two processes: what a
# job that did nothing else would take where it has two CPUs. A job whose
# output is as large as its input (INT4 sources) cannot beat this row.
for r in $(seq "$rounds"); do
    rm -f "$scratch"
    timed "read and write at once" sh -c "$read_in & pid=\$!
        $write_out; rc=\$?; wait \$pid || rc=1; exit \$rc"
done
medians < "$log"
rm -rf "$out" "$log" "$scratch"
exit $status

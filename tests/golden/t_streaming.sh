#!/usr/bin/env bash
# Streamed quantize (issue 18) on a real-geometry layer, where every Linear is
# big enough to take the streamed path: each thread writes its rows straight
# to the shard and input rows are released in blocks as they are consumed.
# What must hold there: peak RSS far below the largest fused unit (gate+up,
# 462 MB of bf16 input; the unit-sized buffers before streaming gave 576 MB),
# and the same bytes whatever the thread count and kernel.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/streaming; rm -rf "$W"; mkdir -p "$W"
FFB=$FF_FAST   # the release binary: RSS and thread interleavings are the point, not UB
RSS_LIMIT_MB=160

$FFB synth --size real --layers 1 --vocab 4096 --vision-layers 0 "$W/in" > /dev/null || { fail streaming_synth; exit 1; }
json=$($FFB quantize "$W/in" "$W/t2" --threads 2 --no-doctor --json 2> "$W/t2.err") || { fail streaming_quantize "$(tail -1 "$W/t2.err")"; exit 1; }
rss_mb=$(echo "$json" | sed 's/.*"peak_rss": \([0-9]*\).*/\1/' | awk '{printf "%d", $1 / 1048576}')
[ "$rss_mb" -lt "$RSS_LIMIT_MB" ] && pass streaming_peak_rss_below_largest_unit "$rss_mb MB on 2 threads, limit $RSS_LIMIT_MB, gate+up input 462 MB" ||
    fail streaming_peak_rss_below_largest_unit "$rss_mb MB on 2 threads, limit $RSS_LIMIT_MB"

# The commands that copy a quantized checkpoint through stream it too: the input's mapping is
# dropped behind the copy (repair-scales kept all of it mapped: a 712 MB input, 733 MB RSS).
peak_rss_mb() {   # CMD...: the child's peak RSS in MB
    python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}
qmb=$(du -sm "$W/t2" | cut -f1)
for cmd in repair-scales dequantize; do
    mb=$(peak_rss_mb $FFB $cmd "$W/t2" "$W/$cmd-out") || { fail "streaming_${cmd}_peak_rss" "it failed"; continue; }
    [ "$mb" -lt 64 ] && pass "streaming_${cmd}_peak_rss" "$mb MB for a $qmb MB quantized input, limit 64" ||
        fail "streaming_${cmd}_peak_rss" "$mb MB for a $qmb MB quantized input, limit 64"
    rm -rf "${W:?}/$cmd-out"
done

# same_as_t2 NAME ARGS...: a run with other threads/kernel gives the 2-thread bytes
same_as_t2() {
    local name=$1; shift
    if ! $FFB quantize "$W/in" "$W/$name" "$@" --no-doctor --quiet > /dev/null 2> "$W/$name.err"; then
        fail "streaming_same_bytes_$name" "$(tail -1 "$W/$name.err")"; return
    fi
    local f diff=""
    for f in "$W"/t2/*.safetensors; do cmp -s "$f" "$W/$name/$(basename "$f")" || diff="$diff $(basename "$f")"; done
    [ -z "$diff" ] && pass "streaming_same_bytes_$name" "$* == --threads 2" ||
        fail "streaming_same_bytes_$name" "$* differs in$diff"
    rm -rf "${W:?}/$name"
}
same_as_t2 threads1 --threads 1
same_as_t2 threads3 --threads 3
if grep -qw avx2 /proc/cpuinfo 2> /dev/null; then same_as_t2 avx2_threads5 --kernel avx2 --threads 5
else echo "SKIP streaming_same_bytes_avx2_threads5 (CPU has no AVX2)"; fi
rm -rf "$W"
exit $GOLDEN_RC

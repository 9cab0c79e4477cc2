#!/usr/bin/env bash
# Fault tests (issue 17): a run that is killed, runs out of space, cannot
# write, races another run or points OUT at its own input leaves the input
# unchanged and nothing half-written at OUT; a later run cleans up after a
# kill -9 and gives the same bytes. Each case prints its exit code and what
# was left on disk.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/faults; rm -rf "$W"; mkdir -p "$W"
FFB=$FF_FAST   # the release binary: these cases are about the file system, not memory safety
sumdir() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-16; }
# an output's sum: its card's serve line names the OUT it was written to
outsum() { (cd "$1" && find . -type f | LC_ALL=C sort | while read -r f; do
    echo "$f"; if [ "${f##*/}" = README.md ]; then grep -v '^vllm serve ' "$f"; else cat "$f"; fi; done) | sha256sum | cut -c1-16; }
left() { (cd "$(dirname "$1")" && ls -d "$(basename "$1")" "$(basename "$1")".partial-* "$(basename "$1")".doctor-* 2>/dev/null | tr '\n' ' '); }

$FFB synth --size real --layers 1 --vocab 16384 --vision-layers 0 "$W/big" > /dev/null || { fail faults_synth; exit 1; }
$FFB synth "$W/small" > /dev/null || { fail faults_synth_small; exit 1; }
$FFB quantize "$W/big" "$W/ref" --no-doctor --quiet > /dev/null || { fail faults_reference_run; exit 1; }
IN_SUM=$(sumdir "$W/big"); REF_SUM=$(outsum "$W/ref")

# kill SIG: start a run, wait until it is staging, send SIG; prints the exit code
killed_run() {
    local sig=$1 out=$2
    $FFB quantize "$W/big" "$out" --no-doctor --quiet > /dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 200); do ls -d "$out".partial-* > /dev/null 2>&1 && break; sleep 0.02; done
    kill -"$sig" $pid 2> /dev/null
    wait $pid 2> /dev/null
}
killed_run TERM "$W/o-term"; rc=$?
if [ $rc -eq 143 ] && [ -z "$(left "$W/o-term")" ] && [ "$(sumdir "$W/big")" = "$IN_SUM" ]; then
    pass fault_sigterm_leaves_nothing "rc=$rc, left: none, input unchanged"
else fail fault_sigterm_leaves_nothing "rc=$rc, left: $(left "$W/o-term")"; fi
killed_run INT "$W/o-int"; rc=$?
[ $rc -eq 130 ] && [ -z "$(left "$W/o-int")" ] && pass fault_sigint_leaves_nothing "rc=$rc, left: none" ||
    fail fault_sigint_leaves_nothing "rc=$rc, left: $(left "$W/o-int")"
killed_run KILL "$W/o-kill"; rc=$?
stale=$(left "$W/o-kill")
$FFB quantize "$W/big" "$W/o-kill" --no-doctor --quiet > /dev/null 2>&1; rc2=$?
if [ $rc -eq 137 ] && [ -n "$stale" ] && [ $rc2 -eq 0 ] && [ "$(left "$W/o-kill")" = "o-kill " ] &&
   [ "$(outsum "$W/o-kill")" = "$REF_SUM" ] && [ "$(sumdir "$W/big")" = "$IN_SUM" ]; then
    pass fault_sigkill_then_rerun_cleans_and_matches "rc=$rc left: $stale; rerun rc=$rc2, stale partial collected, bytes = reference"
else fail fault_sigkill_then_rerun_cleans_and_matches "rc=$rc left: $stale; rerun rc=$rc2 left: $(left "$W/o-kill")"; fi

# OUT appears while the run is in progress: the newcomer is left alone
$FFB quantize "$W/big" "$W/o-race" --no-doctor --quiet > "$W/race.out" 2>&1 &
pid=$!
for _ in $(seq 200); do ls -d "$W"/o-race.partial-* > /dev/null 2>&1 && break; sleep 0.02; done
mkdir "$W/o-race" && echo mine > "$W/o-race/keep.txt"
wait $pid; rc=$?
if [ $rc -eq 1 ] && grep -q "appeared while this run was in progress" "$W/race.out" && [ "$(cat "$W/o-race/keep.txt")" = mine ] &&
   [ "$(left "$W/o-race")" = "o-race " ]; then pass fault_out_appears_during_run "rc=$rc, the folder that appeared is untouched"
else fail fault_out_appears_during_run "rc=$rc $(tail -1 "$W/race.out")"; fi

# two runs into one OUT: exactly one wins, the other says why
$FFB quantize "$W/big" "$W/o-two" --no-doctor --quiet > "$W/two1.out" 2>&1 & p1=$!
$FFB quantize "$W/big" "$W/o-two" --no-doctor --quiet > "$W/two2.out" 2>&1 & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
if [ $((r1 + r2)) -eq 1 ] && cat "$W/two1.out" "$W/two2.out" | grep -q "appeared while this run\|already exists" &&
   [ "$(outsum "$W/o-two")" = "$REF_SUM" ] && [ "$(left "$W/o-two")" = "o-two " ]; then
    pass fault_two_runs_one_out "exit codes $r1 and $r2; the winner's bytes = reference"
else fail fault_two_runs_one_out "exit codes $r1 and $r2"; fi

# OUT is the input, its parent, or inside it: refused (exit 2), input intact, --force or not
for case in "same:$W/big" "parent:$W" "inside:$W/big/sub"; do
    name=${case%%:*}; out=${case#*:}
    $FFB quantize "$W/big" "$out" --force --no-doctor --quiet > "$W/io-$name.out" 2>&1; rc=$?
    if [ $rc -eq 2 ] && [ "$(sumdir "$W/big")" = "$IN_SUM" ] && [ ! -e "$W/big/sub" ]; then
        pass "fault_out_${name}_of_input_refused" "rc=$rc: $(head -c 120 "$W/io-$name.out")"
    else fail "fault_out_${name}_of_input_refused" "rc=$rc"; fi
done
$FFB dequantize "$W/ref" "$W" --force > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && [ -d "$W/ref" ] && pass fault_dequantize_out_parent_refused "rc=$rc" || fail fault_dequantize_out_parent_refused "rc=$rc"

# ENOSPC and a read-only destination need a small file system of our own
if mkdir -p "$W/mnt" && mount -t tmpfs -o size=64k tmpfs "$W/mnt" 2> /dev/null; then
    umount "$W/mnt"
    need=$(du -sb "$W/ref" | cut -f1)
    for pct in 10 50 90; do
        kb=$(( need * pct / 100 / 1024 + 16 ))
        mount -t tmpfs -o size=${kb}k tmpfs "$W/mnt"
        $FFB quantize "$W/big" "$W/mnt/out" --no-doctor --quiet > "$W/enospc.out" 2>&1; rc=$?
        rest=$(ls -A "$W/mnt" | tr '\n' ' ')
        umount "$W/mnt"
        if [ $rc -eq 1 ] && grep -q "No space left" "$W/enospc.out" && [ -z "$rest" ]; then
            pass "fault_enospc_${pct}pct" "rc=$rc, left: none; $(head -c 110 "$W/enospc.out")"
        else fail "fault_enospc_${pct}pct" "rc=$rc, left: $rest $(tail -1 "$W/enospc.out")"; fi
    done
    # dequantize and merge allocate their blocks first, as quantize does: the
    # refusal comes before a byte is written. With fallocate refused (a file
    # system without it: a preload shim here), the pool's own writes meet
    # ENOSPC instead, and the first failure is the one reported.
    printf '%s\n' '#define _GNU_SOURCE' '#include <errno.h>' '#include <fcntl.h>' \
        'int fallocate(int fd, int mode, off_t off, off_t len) { (void)fd; (void)mode; (void)off; (void)len; errno = EOPNOTSUPP; return -1; }' \
        'int fallocate64(int fd, int mode, off_t off, off_t len) { return fallocate(fd, mode, off, len); }' > "$W/nofalloc.c"
    shim=""
    cc -shared -fPIC -o "$W/nofalloc.so" "$W/nofalloc.c" 2> /dev/null && shim="$W/nofalloc.so"
    kb=$(( $(du -sb "$W/big" | cut -f1) / 2 / 1024 ))
    for how in reserved shim; do
        [ $how = shim ] && [ -z "$shim" ] && { echo "SKIP fault_enospc_dequantize_shim (no C compiler for the shim)"; continue; }
        mount -t tmpfs -o size=${kb}k tmpfs "$W/mnt"
        # the shim's run at 4 threads: its failing writes pass dequantize's write gate (more threads than writers)
        if [ $how = shim ]; then LD_PRELOAD=$shim $FFB dequantize "$W/ref" "$W/mnt/out" --threads 4 > "$W/dq-enospc.out" 2>&1
        else $FFB dequantize "$W/ref" "$W/mnt/out" --threads 2 > "$W/dq-enospc.out" 2>&1; fi; rc=$?
        rest=$(ls -A "$W/mnt" | tr '\n' ' ')
        umount "$W/mnt"
        if [ $rc -eq 1 ] && [ "$(wc -l < "$W/dq-enospc.out")" -eq 1 ] && grep -q "No space left" "$W/dq-enospc.out" &&
            [ -z "$rest" ]; then
            pass "fault_enospc_dequantize_$how" "rc=$rc, left: none; $(head -c 110 "$W/dq-enospc.out")"
        else fail "fault_enospc_dequantize_$how" "rc=$rc, left: $rest $(tail -1 "$W/dq-enospc.out")"; fi
    done
    mount -t tmpfs -o size=1m,ro tmpfs "$W/mnt"
    $FFB quantize "$W/small" "$W/mnt/out" --no-doctor --quiet > "$W/ro.out" 2>&1; rc=$?
    rest=$(ls -A "$W/mnt" | tr '\n' ' ')
    umount "$W/mnt"
    if [ $rc -eq 1 ] && grep -q "Read-only file system" "$W/ro.out" && [ -z "$rest" ]; then
        pass fault_readonly_destination "rc=$rc: $(head -c 110 "$W/ro.out")"
    else fail fault_readonly_destination "rc=$rc $(tail -1 "$W/ro.out")"; fi
else
    echo "SKIP fault_enospc (cannot mount a tmpfs here: not root or no CAP_SYS_ADMIN)"
    echo "SKIP fault_readonly_destination (cannot mount a read-only tmpfs here)"
fi

# 2,000 shards at the default open-file limit (1024): quantize, dequantize, diff
$FFB synth --layers 230 --hidden 64 --intermediate 128 --heads 2 --kv-heads 1 --head-dim 32 \
    --global-head-dim 32 --global-kv-heads 1 --vocab 256 --vision-layers 0 --shard-size 1kB "$W/many" > /dev/null
n=$(ls "$W/many"/*.safetensors | wc -l)
( ulimit -n 1024
  $FFB quantize "$W/many" "$W/many-q" --no-doctor --quiet > "$W/many.out" 2>&1 &&
  $FFB dequantize "$W/many-q" "$W/many-dq" >> "$W/many.out" 2>&1 &&
  $FFB diff "$W/many" "$W/many" >> "$W/many.out" 2>&1 ); rc=$?
if [ "$n" -ge 2000 ] && [ $rc -eq 0 ]; then pass fault_2000_shards_at_default_fd_limit "$n shards, ulimit -n 1024: quantize, dequantize, diff rc=0"
else fail fault_2000_shards_at_default_fd_limit "$n shards rc=$rc $(tail -1 "$W/many.out")"; fi
rm -rf "$W/big" "$W/ref" "$W"/o-* "$W/many"*
exit $GOLDEN_RC

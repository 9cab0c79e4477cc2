#!/usr/bin/env bash
# Fuzz tier: each libFuzzer harness (build/fuzz/fuzz_*, clang, ASan+UBSan, leak
# detection on) for FP4FORGE_FUZZ_SECONDS (default 12), two at a time, from its checked-in seed
# corpus. A crash, leak, UB report or timeout on any input fails the harness and
# leaves the input as build/fuzz/<harness>/crash-*; new inputs found go to
# build/fuzz-work/<harness>/corpus, never into the tree.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
SECS=${FP4FORGE_FUZZ_SECONDS:-12}
# fuzz_one BIN: one harness's run; its verdict line to BIN's work folder (verdict), so two
# harnesses can run at once and still print in order
fuzz_one() {
    local bin=$1 h name work log st runs why
    h=$(basename "$bin"); name=${h#fuzz_}
    work="$B/fuzz-work/$h"; mkdir -p "$work/corpus"; rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-*
    log="$work/log"
    (cd "$work" && "$OLDPWD/$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 corpus "$OLDPWD/tests/fuzz/corpus/$name") > "$log" 2>&1
    st=$?
    runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1)
    if [ $st -eq 0 ] && [ -n "$runs" ]; then
        echo "PASS fuzz_$name (${runs}s, 0 crashes; seeds tests/fuzz/corpus/$name)" > "$work/verdict"
    else
        why=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | cut -c1-160)
        echo "FAIL fuzz_$name (exit $st: ${why:-see $log}; input: $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | head -1))" > "$work/verdict"
    fi
}
# Each harness is one single-threaded process: LANES of them at once (CI has two cores), each
# still fuzzing its full SECS.
LANES=${FP4FORGE_FUZZ_LANES:-2}
bins=()
for bin in "$B"/fuzz/fuzz_*; do [ -x "$bin" ] && bins+=("$bin"); done
for ((i = 0; i < ${#bins[@]}; i += LANES)); do
    for bin in "${bins[@]:i:LANES}"; do rm -f "$B/fuzz-work/$(basename "$bin")/verdict"; fuzz_one "$bin" & done
    wait
done
rc=0
for bin in "${bins[@]}"; do
    v="$B/fuzz-work/$(basename "$bin")/verdict"
    if [ -f "$v" ]; then cat "$v"; else echo "FAIL fuzz_$(basename "$bin" | sed 's/^fuzz_//') (no verdict: the run died)"; fi
    grep -q '^PASS ' "$v" 2> /dev/null || rc=1
done
ls "$B"/fuzz/fuzz_* > /dev/null 2>&1 || { echo "FAIL fuzz_harnesses_built (none under $B/fuzz; make fuzz-build)"; rc=1; }
exit $rc

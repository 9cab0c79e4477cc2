#!/usr/bin/env bash
# Fuzz tier: each libFuzzer harness (build/fuzz/fuzz_*, clang, ASan+UBSan, leak
# detection on) for FP4FORGE_FUZZ_SECONDS (default 12) from its checked-in seed
# corpus. A crash, leak, UB report or timeout on any input fails the harness and
# leaves the input as build/fuzz/<harness>/crash-*; new inputs found go to
# build/fuzz-work/<harness>/corpus, never into the tree.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
SECS=${FP4FORGE_FUZZ_SECONDS:-12}
rc=0
for bin in "$B"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    h=$(basename "$bin"); name=${h#fuzz_}
    work="$B/fuzz-work/$h"; mkdir -p "$work/corpus"; rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-*
    log="$work/log"
    (cd "$work" && "$OLDPWD/$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 corpus "$OLDPWD/tests/fuzz/corpus/$name") > "$log" 2>&1
    st=$?
    runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1)
    if [ $st -eq 0 ] && [ -n "$runs" ]; then
        echo "PASS fuzz_$name (${runs}s, 0 crashes; seeds tests/fuzz/corpus/$name)"
    else
        why=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | cut -c1-160)
        echo "FAIL fuzz_$name (exit $st: ${why:-see $log}; input: $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | head -1))"
        rc=1
    fi
done
ls "$B"/fuzz/fuzz_* > /dev/null 2>&1 || { echo "FAIL fuzz_harnesses_built (none under $B/fuzz; make fuzz-build)"; rc=1; }
exit $rc

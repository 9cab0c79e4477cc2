#!/usr/bin/env bash
# The test runner itself: a test binary that prints PASS lines and then
# crashes (an ASan report, a signal) must fail the tier, never count as passed.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/runner; rm -rf "$W"; mkdir -p "$W"
cat > "$W/asan_after_pass.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
int main(void)
{
    printf("PASS looks_fine\n");
    fflush(stdout);
    volatile char *p = malloc(4);
    p[8] = 1;              /* heap overflow: ASan aborts here */
    free((void *)p);
    return 0;
}
C
printf '#!/bin/sh\necho "PASS looks_fine_too"\nkill -SEGV $$\n' > "$W/signal_after_pass"
chmod +x "$W/signal_after_pass"
printf '#!/bin/sh\necho "PASS clean"\n' > "$W/clean"
chmod +x "$W/clean"
if cc -fsanitize=address -g -o "$W/asan_after_pass" "$W/asan_after_pass.c" 2> "$W/cc.err"; then
    bins="$W/asan_after_pass $W/signal_after_pass"
else
    bins="$W/signal_after_pass"; echo "SKIP runner_asan_binary (no ASan compiler: $(head -1 "$W/cc.err"))"
fi
for b in $bins; do
    name=$(basename "$b")
    FP4FORGE_RESULTS="$W/$name.log" FP4FORGE_UNIT_BINARIES="$b" bash tests/run_all.sh unit > "$W/$name.out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q "^0 passed\|^1 passed, 1 failed" "$W/$name.out" && grep -q "^FAIL ${name}_exited" "$W/$name.out"; then
        pass "runner_crash_after_pass_fails_$name" "rc=$rc, $(tail -1 "$W/$name.out")"
    else
        fail "runner_crash_after_pass_fails_$name" "rc=$rc, $(tail -1 "$W/$name.out")"
    fi
done
FP4FORGE_RESULTS="$W/clean.log" FP4FORGE_UNIT_BINARIES="$W/clean" bash tests/run_all.sh unit > "$W/clean.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^1 passed, 0 failed" "$W/clean.out" && pass runner_clean_binary_passes || fail runner_clean_binary_passes "rc=$rc"
exit $GOLDEN_RC

#!/usr/bin/env bash
# Runs the named tiers (unit, golden, fuzz, conformance). Every check prints one
# "PASS name" or "FAIL name" line; this script counts them and closes with the
# line CI reads: "N passed, N failed".
# A crash is a failure, never a pass: pipefail keeps a test binary's exit
# status through `tee`, and a binary that dies (ASan report, abort, signal)
# after printing PASS lines gets its own FAIL line.
set -u -o pipefail
cd "$(dirname "$0")/.."
# the build folder: Makefile's B= (a helper's second build beside the main one)
export B=${B:-build}
mkdir -p "$B"
# shared/ (fixtures) sits beside the checkout, in CI as here.
if [ -z "${FP4FORGE_SHARED:-}" ]; then
    FP4FORGE_SHARED=$(cd .. && pwd)/shared
    [ -d "$FP4FORGE_SHARED/fixtures" ] || FP4FORGE_SHARED=/work/shared
fi
export FP4FORGE_SHARED ROOT_SHARED=$FP4FORGE_SHARED
export FIXTURES=${FIXTURES:-$FP4FORGE_SHARED/fixtures}
export FP4FORGE_FIXTURES=${FP4FORGE_FIXTURES:-$FIXTURES}
export FP4FORGE_GEMMA4_TINY=${FP4FORGE_GEMMA4_TINY:-$FIXTURES/gemma4-tiny-dense.tar.gz}
log=${FP4FORGE_RESULTS:-$B/results.txt}
# run_binary T: runs one test binary; a non-zero exit (a crash included) is
# recorded as "FAIL T_exited" so the closing count cannot miss it.
run_binary() {
    "$1" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
        echo "FAIL $(basename "$1")_exited (exit $rc)" | tee -a "$log"
        status=1
    fi
}
: > "$log"
status=0
for tier in "$@"; do
    echo "== tier: $tier"
    case "$tier" in
    unit)
        for t in ${FP4FORGE_UNIT_BINARIES:-$B/tests/test_*}; do
            [ -x "$t" ] || continue
            run_binary "$t"
        done ;;
    golden)
        bash tests/golden/run.sh 2>&1 | tee -a "$log" || { echo "FAIL golden_tier_exited" | tee -a "$log"; status=1; } ;;
    fuzz)
        bash tests/fuzz/run.sh 2>&1 | tee -a "$log" || status=1 ;;
    conformance)
        bash tests/conformance/run.sh 2>&1 | tee -a "$log" || { echo "FAIL conformance_tier_exited" | tee -a "$log"; status=1; } ;;
    *) echo "unknown tier $tier"; status=1 ;;
    esac
done
pass=$(grep -c '^PASS ' "$log")
fail=$(grep -c '^FAIL ' "$log")
skip=$(grep -c '^SKIP ' "$log")
echo
grep '^FAIL ' "$log" || true
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$status" -eq 0 ]

#!/usr/bin/env bash
# Runs the named tiers (unit, golden, conformance). Every check prints one
# "PASS name" or "FAIL name" line; this script counts them and closes with the
# line CI reads: "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
mkdir -p build
# shared/ (fixtures) sits beside the checkout, in CI as here.
if [ -z "${FP4FORGE_SHARED:-}" ]; then
    FP4FORGE_SHARED=$(cd .. && pwd)/shared
    [ -d "$FP4FORGE_SHARED/fixtures" ] || FP4FORGE_SHARED=/work/shared
fi
export FP4FORGE_SHARED ROOT_SHARED=$FP4FORGE_SHARED
export FIXTURES=${FIXTURES:-$FP4FORGE_SHARED/fixtures}
export FP4FORGE_FIXTURES=${FP4FORGE_FIXTURES:-$FIXTURES}
export FP4FORGE_GEMMA4_TINY=${FP4FORGE_GEMMA4_TINY:-$FIXTURES/gemma4-tiny-dense.tar.gz}
log=build/results.txt
: > "$log"
status=0
for tier in "$@"; do
    echo "== tier: $tier"
    case "$tier" in
    unit)
        for t in build/tests/test_*; do
            [ -x "$t" ] || continue
            "$t" 2>&1 | tee -a "$log" || status=1
        done ;;
    golden)
        bash tests/golden/run.sh 2>&1 | tee -a "$log" || status=1 ;;
    conformance)
        bash tests/conformance/run.sh 2>&1 | tee -a "$log" || status=1 ;;
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

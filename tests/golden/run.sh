#!/usr/bin/env bash
# Golden tier: runs every tests/golden/t_*.sh; each prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}   # the build folder (Makefile's B=), so a second checkout user tests its own
export FF=${FF:-$B/fp4forge-san}
export FF_FAST=${FF_FAST:-$B/fp4forge}
export WORK=${WORK:-$B/golden-work}
export ROOT_SHARED=${ROOT_SHARED:-$(cd .. && pwd)/shared}
rm -rf "$WORK"; mkdir -p "$WORK"
rc=0
for t in tests/golden/t_*.sh; do
    [ -f "$t" ] || continue
    t0=$SECONDS
    bash "$t" || rc=1
    echo "# $(basename "$t") took $((SECONDS - t0))s (the whole suite must stay under 40 minutes)"
done
exit $rc

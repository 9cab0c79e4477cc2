#!/usr/bin/env bash
# Golden tier: runs every tests/golden/t_*.sh; each prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")/../.."
export FF=${FF:-build/fp4forge-san}
export FF_FAST=${FF_FAST:-build/fp4forge}
export WORK=${WORK:-build/golden-work}
export ROOT_SHARED=${ROOT_SHARED:-$(cd .. && pwd)/shared}
rm -rf "$WORK"; mkdir -p "$WORK"
rc=0
for t in tests/golden/t_*.sh; do
    [ -f "$t" ] || continue
    bash "$t" || rc=1
done
exit $rc

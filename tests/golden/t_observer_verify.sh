#!/usr/bin/env bash
# verify --against on an output made with a search observer reports, per
# tensor, what min/max would have given; checked against a real min/max
# output of the same source (the two figures must be equal, tensor by tensor).
set -u
cd "$(dirname "$0")/../.."
. tests/golden/lib.sh
W=$WORK/observer-verify; rm -rf "$W"; mkdir -p "$W"
"$FF_FAST" synth --arch gemma4-moe "$W/src" > /dev/null 2>&1 \
    && "$FF_FAST" quantize --quiet --observer expanded-mse "$W/src" "$W/mse" > /dev/null 2>&1 \
    && "$FF_FAST" quantize --quiet "$W/src" "$W/mm" > /dev/null 2>&1 || { fail observer_verify_setup; exit 1; }
"$FF" verify "$W/mse" --against "$W/src" --json > "$W/mse.json"; st1=$?
"$FF" verify "$W/mm" --against "$W/src" --json > "$W/mm.json"; st2=$?
"$FF" verify "$W/mse" --against "$W/src" > "$W/mse.txt"
[ $st1 -eq 0 ] && [ $st2 -eq 0 ] && pass observer_verify_runs "rc=0 twice" || fail observer_verify_runs "rc=$st1/$st2"
out=$(python3 - "$W/mse.json" "$W/mm.json" <<'PYEOF'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
mm = {r["module"]: r["rel_error"] for r in b["tensors"]}
d = [abs(r["minmax_rel_error"] - mm[r["module"]]) for r in a["tensors"]]
ok = len(d) == len(mm) and max(d) == 0 and a["error"]["mean_minmax_rel_error"] > a["error"]["mean_rel_error"]
print(("ok " if ok else "bad ") + f"{len(d)} tensors, max |minmax_rel_error - min/max output's rel_error| {max(d)}, "
      f"mean {a['error']['observer']} {a['error']['mean_rel_error']:.4f} vs min/max {a['error']['mean_minmax_rel_error']:.4f}")
PYEOF
)
case "$out" in ok*) pass observer_verify_minmax_equals_real "${out#ok }" ;; *) fail observer_verify_minmax_equals_real "$out" ;; esac
grep -q "(min/max: " "$W/mse.txt" && grep -q "where min/max would give mean rel" "$W/mse.txt" \
    && pass observer_verify_text "worst tensors list min/max beside the observer's error" \
    || fail observer_verify_text "see $W/mse.txt"
! grep -q "min/max" <("$FF" verify "$W/mm" --against "$W/src") && pass observer_verify_minmax_output_unchanged \
    || fail observer_verify_minmax_output_unchanged
exit $GOLDEN_RC

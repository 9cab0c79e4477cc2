#!/usr/bin/env bash
# Conformance for doctor: the fixtures the golden test fixed are loaded with
# transformers' Gemma4Config and every layer's head_dim / KV heads must match
# the tensors; the unfixed k_eq_v fixture must show the silent misread
# (transformers' default global_head_dim 512) that doctor exists to catch.
set -u
FF=${FF:-build/fp4forge}
WORK=${WORK:-build/conformance-work}
PY=${PY:?PY must name the conformance venv python}
G=$WORK/doctor-golden
mkdir -p "$G"
if ! FF=$FF WORK=$G bash tests/golden/t_doctor.sh > "$G/golden.log" 2>&1 || grep -q '^FAIL' "$G/golden.log"; then
    echo "FAIL doctor_conf_fixtures (see $G/golden.log)"; exit 1
fi
grep -q '^SKIP' "$G/golden.log" && { echo "SKIP doctor_conf (no fixtures)"; exit 0; }
D=$G/doctor
rc=0
load() {  # load NAME DIR [--expect-mismatch]
    local out; out=$("$PY" tests/conformance/doctor_load_config.py "${@:2}" 2>&1 | tail -1)
    if [ "${PIPESTATUS[0]}" -eq 0 ]; then echo "PASS doctor_conf_$1"; else echo "FAIL doctor_conf_$1 ($out)"; rc=1; fi
}
for c in keqv drift topl hetero keys aux tok; do
    load "${c}_fixed_loads_with_right_geometry" "$D/$c.fixed"
done
# the k_eq_v fixture before the fix: transformers loads it without a word, wrongly
B=$D/keqv-broken; rm -rf "$B"; cp -r "$D/base" "$B"
"$PY" - "$B/config.json" <<'PYEOF'
import json, sys
p = sys.argv[1]; j = json.load(open(p)); del j["text_config"]["per_layer_config"]; json.dump(j, open(p, "w"))
PYEOF
load keqv_unfixed_is_silently_misread "$B" --expect-mismatch
exit $rc

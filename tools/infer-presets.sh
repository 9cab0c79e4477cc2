#!/usr/bin/env bash
# plan --infer against the built-in families (issue 37): for every synth preset (tiny) and
# every checkpoint folder given, the proposal is passed back with --family-file unedited and
# compared with the built-in family: plan --json (the family names and notes aside), then the
# quantized tensors and config.json (sha256) and a verify --family-file of that output.
# One line per model: derived or the NOT derived reason, plan same/DIFF, bytes same/DIFF.
#   bash tools/infer-presets.sh [FP4FORGE] WORKDIR [DIR...]
set -uo pipefail
F=build/fp4forge
[ -x "${1:-}" ] && [ ! -d "$1" ] && { F=$(realpath "$1"); shift; }
W=$1; shift; mkdir -p "$W"
# a family's notes are its author's word on serving (gpt-oss: vLLM 0.32 cannot load the output), which
# no checkpoint shows: compared without them
strip='import json,sys; j=json.load(open(sys.argv[1])); [j.pop(k) for k in ("family","families","notes")]; print(json.dumps(j,sort_keys=True))'
planj() { "$F" plan "$@" --json 2>&1 | python3 -c "$strip" /dev/stdin 2>&1; }
digest() { (cd "$1" 2>/dev/null && sha256sum ./*.safetensors config.json | sha256sum | cut -c1-16); }
dirs=()
for a in $("$F" synth --help 2>&1 | sed -n '/^presets/,$p' | awk '/^  [a-z]/{print $1}'); do
    [ -d "$W/$a" ] || "$F" synth --arch "$a" "$W/$a" > /dev/null 2>&1
    dirs+=("$W/$a")
done
dirs+=("$@")
same_plan=0 same_bytes=0
for d in "${dirs[@]}"; do
    n=$(basename "$d")
    "$F" plan "$d" --infer > "$W/$n.fam" 2> /dev/null
    why=$(grep -m1 -o 'NOT derived: .\{0,90\}\|^# derived' "$W/$n.fam" | sed 's/^# //')
    plan=DIFF bytes=- verify=-
    if [ "$(planj "$d")" = "$(planj "$d" --family-file "$W/$n.fam")" ]; then
        plan=same; same_plan=$((same_plan + 1))
        rm -rf "$W/q-$n" "$W/f-$n"
        "$F" quantize "$d" "$W/q-$n" --quiet --no-doctor > /dev/null 2>&1
        "$F" quantize "$d" "$W/f-$n" --family-file "$W/$n.fam" --quiet --no-doctor > /dev/null 2>&1
        bytes=DIFF; [ -n "$(digest "$W/q-$n")" ] && [ "$(digest "$W/q-$n")" = "$(digest "$W/f-$n")" ] && { bytes=same; same_bytes=$((same_bytes + 1)); }
        "$F" verify "$W/f-$n" --family-file "$W/$n.fam" > /dev/null 2>&1 && verify=PASS || verify=FAIL
    fi
    printf '%-20s plan %-4s  bytes %-4s  verify %-4s  %s\n' "$n" "$plan" "$bytes" "$verify" "$why"
done
echo "${#dirs[@]} models: the proposal passed back gives the built-in plan on $same_plan, the same tensors on $same_bytes"

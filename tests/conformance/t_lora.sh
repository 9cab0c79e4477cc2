#!/usr/bin/env bash
# LoRA against peft: a tiny Gemma-4 from transformers, random adapters made by
# peft; fp4forge merge == peft merge_and_unload() to bf16 rounding, one-pass
# merge+quantize == quantize(merged folder) byte for byte, gates on real adapters.
set -u
pass() { echo "PASS $1${2:+ ($2)}"; }
fail() { echo "FAIL $1${2:+ ($2)}"; RC=1; }
RC=0
W=$WORK/lora; rm -rf "$W"; mkdir -p "$W"
HERE=$(dirname "$0")
FIX=${FP4FORGE_FIXTURES:-/work/shared/fixtures}
tar xzf "$FIX/gemma4-tiny-dense.tar.gz" -C "$W" || { fail lora_fixture; exit 1; }
B=$W/gemma4-tiny-dense
if ! "$PY" "$HERE/lora_make.py" "$B" "$W" plain rslora inert vision dora > "$W/make.log" 2>&1; then
    fail lora_peft_make "$(tail -2 "$W/make.log" | xargs)"; exit 1
fi

for v in plain rslora; do
    if $FF merge "$B" "$W/adapter-$v" "$W/ff-$v" > "$W/merge-$v.out" 2>&1 &&
       out=$("$PY" "$HERE/lora_check.py" "$W/ff-$v" "$W/peft-$v" "$B" "$W/adapter-$v" 2>&1); then
        pass "lora_merge_equals_peft_$v" "$out; $(grep -o 'merged [0-9]*/[0-9]*' "$W/merge-$v.out")"
    else fail "lora_merge_equals_peft_$v" "${out:-} $(tail -1 "$W/merge-$v.out")"; fi
    $FF quantize --quiet --no-doctor "$B" "$W/q1-$v" --lora "$W/adapter-$v" > /dev/null 2>&1
    $FF quantize --quiet --no-doctor "$W/ff-$v" "$W/q2-$v" > /dev/null 2>&1
    same=1; n=$(ls "$W/q2-$v" | wc -l)
    [ -f "$W/q1-$v/model.safetensors" ] || same=0
    bash "$(dirname "$0")/../same_output.sh" "$W/q1-$v" "$W/q2-$v" > /dev/null || same=0
    if [ $same -eq 1 ]; then pass "lora_one_pass_equals_two_pass_$v" "$n files, $(stat -c %s "$W/q1-$v/model.safetensors") B model.safetensors identical"
    else fail "lora_one_pass_equals_two_pass_$v"; fi
done

gate() {
    local name=$1 pat=$2
    $FF merge "$B" "$W/adapter-$name" "$W/out-$name" > "$W/gate-$name.out" 2>&1; local rc=$?
    if [ $rc -ne 0 ] && grep -qE "$pat" "$W/gate-$name.out" && [ ! -e "$W/out-$name" ]; then
        pass "lora_gate_peft_$name" "$(head -c 140 "$W/gate-$name.out")"
    else fail "lora_gate_peft_$name" "rc=$rc $(head -c 200 "$W/gate-$name.out")"; fi
}
gate inert "inert adapter: .* 0/82 non-zero"
gate vision "vision_tower.*targets a vision Linear"
gate dora "unsupported: DoRA"
exit $RC

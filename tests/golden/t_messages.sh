#!/usr/bin/env bash
# What a new user types wrong, and the one line that answers it: a typo'd option or command
# gets "did you mean", the command named once; `help CMD` and `CMD --version` work; a path
# that is missing, a GGUF file, or a folder of PyTorch pickles says what fp4forge reads and
# how to convert; completion offers the fixed choices; the verify page's colours run from 0
# to the check's limit; the command list stays aligned.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/messages; rm -rf "$W"; mkdir -p "$W"
$FF_FAST synth --arch qwen3-moe "$W/tiny" > /dev/null

# one_line NAME WANT_RC WANT_TEXT [NOT_TEXT] -- CMD...: one line on stderr holding WANT_TEXT
one_line() {
    local name=$1 want_rc=$2 want=$3 not=$4; shift 5
    "$@" > "$W/$name.out" 2> "$W/$name.err"; local rc=$?
    local lines; lines=$(wc -l < "$W/$name.err")
    if [ $rc -eq "$want_rc" ] && [ "$lines" = 1 ] && grep -qF -- "$want" "$W/$name.err" &&
       { [ -z "$not" ] || ! grep -qF -- "$not" "$W/$name.err"; }; then
        pass "msg_$name" "rc=$rc: $(cut -c1-140 "$W/$name.err")"
    else fail "msg_$name" "rc=$rc, $lines lines: $(head -c 300 "$W/$name.err")"; fi
}
one_line option_typo 2 "unknown option --obsever; did you mean --observer?" "quantize: quantize" -- \
    $FF quantize "$W/tiny" "$W/out" --obsever mse
one_line command_typo 2 "did you mean 'quantize'?" "" -- $FF quantise "$W/tiny"
one_line missing_path 1 "no such file or folder" "not a folder" -- $FF plan "$W/nope"
printf 'GGUF\003\000\000\000' > "$W/model.gguf"
one_line gguf_file 1 "a GGUF file; fp4forge reads a Hugging Face folder" "" -- $FF plan "$W/model.gguf"
mkdir -p "$W/pickles"; cp "$W/tiny/config.json" "$W/pickles/"; : > "$W/pickles/pytorch_model.bin"
one_line pytorch_bin 1 "only PyTorch pickles (*.bin / *.pt)" "" -- $FF quantize "$W/pickles" "$W/out2" --no-doctor
[ ! -e "$W/out" ] && [ ! -e "$W/out2" ] && pass msg_nothing_written || fail msg_nothing_written

out=$($FF help quantize); rc=$?
[ $rc = 0 ] && grep -q '^usage: fp4forge quantize' <<< "$out" && ! grep -q '^commands:' <<< "$out" \
    && pass msg_help_command "$(head -1 <<< "$out")" || fail msg_help_command "rc=$rc $(head -2 <<< "$out")"
out=$($FF quantize --version); rc=$?
[ $rc = 0 ] && grep -qE '^fp4forge [0-9]+\.[0-9]+' <<< "$out" && pass msg_command_version "$out" || fail msg_command_version "rc=$rc $out"
# the command list: every summary starts in one column, repair-scales included
cols=$($FF --help | awk '/^commands:/{on=1; next} on && NF {match($0, /^  [a-z-]+ +/); print RLENGTH}' | sort -u)
[ "$(wc -l <<< "$cols")" = 1 ] && pass msg_help_aligned "summaries at column $cols" || fail msg_help_aligned "columns: $(echo $cols)"

comp=$($FF completion bash)
for want in '"quantize --observer") COMPREPLY=($(compgen -W "minmax mse expanded-mse' \
            '"quantize --kernel") COMPREPLY=($(compgen -W "scalar avx2 avx512' \
            '"synth --size") COMPREPLY=($(compgen -W "tiny real' '"synth --source") COMPREPLY=($(compgen -W "bf16 fp8-block'; do
    grep -qF -- "$want" <<< "$comp" || { fail msg_completion_choices "missing: $want"; continue; }
done
grep -qF '"synth --arch") COMPREPLY=($(compgen -W "' <<< "$comp" && grep -q 'qwen3.5-moe' <<< "$comp" \
    && pass msg_completion_choices "observer, kernel, size, source and the family table's presets" \
    || fail msg_completion_choices "no synth --arch presets"

# verify --html: a passing model is coloured against the limit, never red
$FF quantize "$W/tiny" "$W/q" --no-doctor --quiet > /dev/null 2>&1
$FF verify "$W/q" --against "$W/tiny" --html "$W/v.html" > /dev/null 2>&1; rc=$?
if [ $rc = 0 ] && grep -q 'red = 0.250, the limit past which a tensor fails' "$W/v.html" && ! grep -q "hsl(0," "$W/v.html" &&
   ! grep -q '<title>layer 0 0' "$W/v.html"; then
    pass msg_html_colours_anchored "legend at the limit 0.250, no red cell in a passing model"
else fail msg_html_colours_anchored "rc=$rc $(grep -o 'colour:[^<]*' "$W/v.html" | head -1)"; fi
# --dry-run runs every check of the real run and writes nothing: each case exits as the real
# run would (2 usage, 1 an existing OUT, 4 a doctor finding), the clean one 0
dry() {
    local name=$1 want=$2; shift 2
    "$@" > "$W/dry-$name.out" 2>&1; local rc=$?
    if [ $rc = "$want" ] && [ ! -e "$W/dry-out" ] && ! ls -d "$W"/dry-out.* > /dev/null 2>&1; then
        local said; said=$(grep -m1 '^fp4forge quantize: ' "$W/dry-$name.out" || grep '^plan: ' "$W/dry-$name.out")
        pass "msg_dry_run_$name" "rc=$rc: $(cut -c1-110 <<< "$said")"
    else fail "msg_dry_run_$name" "rc=$rc (want $want): $(tail -1 "$W/dry-$name.out")"; fi
}
dry threads_0 2 $FF quantize "$W/tiny" "$W/dry-out" --dry-run --threads 0
dry bogus_observer 2 $FF quantize "$W/tiny" "$W/dry-out" --dry-run --observer bogus
dry bogus_kernel 2 $FF quantize "$W/tiny" "$W/dry-out" --dry-run --kernel avx9000
dry router_recipe 3 $FF quantize "$W/tiny" "$W/dry-out" --dry-run --only 'mlp\.gate$|experts|self_attn'
mkdir -p "$W/exists"
dry existing_out 1 $FF quantize "$W/tiny" "$W/exists" --dry-run
$FF_FAST synth "$W/gemma" > /dev/null && rm "$W/gemma/processor_config.json"
dry doctor_finding 4 $FF quantize "$W/gemma" "$W/dry-out" --dry-run
$FF_FAST synth "$W/aux" > /dev/null   # the same model with its processor files
dry doctor_finding_fix_fails 4 $FF quantize "$W/gemma" "$W/dry-out" --dry-run --fix
dry doctor_finding_fixed 0 $FF quantize "$W/gemma" "$W/dry-out" --dry-run --fix --aux-from "$W/aux"
dry clean 0 $FF quantize "$W/tiny" "$W/dry-out" --dry-run
# diff --values: two outputs of one model that differ in one global scale are not the same
$FF quantize "$W/tiny" "$W/q2" --no-doctor --quiet > /dev/null 2>&1
$FF diff "$W/q" "$W/q2" --values > "$W/diff-same.out" 2>&1; rc_same=$?
python3 - "$W/q2/model.safetensors" > "$W/tamper.out" <<'PYEOF'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    key = next(k for k in h if k.endswith("self_attn.k_proj.weight_global_scale"))
    lo = h[key]["data_offsets"][0]
    f.seek(8 + n + lo); v = struct.unpack("<f", f.read(4))[0]
    f.seek(8 + n + lo); f.write(struct.pack("<f", 2 * v))
print(key)
PYEOF
$FF diff "$W/q" "$W/q2" > "$W/diff-struct.out" 2>&1; rc_struct=$?
$FF diff "$W/q" "$W/q2" --values > "$W/diff-values.out" 2>&1; rc_values=$?
key=$(cat "$W/tamper.out")
if [ $rc_same = 0 ] && [ $rc_struct = 0 ] && [ $rc_values = 6 ] && grep -q "1 differ" "$W/diff-values.out" \
   && grep -q "$key" "$W/diff-values.out" && grep -q "verdict: DIFFERENT" "$W/diff-values.out"; then
    pass msg_diff_values "structure SAME (rc 0), --values DIFFERENT (rc 6) naming $key"
else fail msg_diff_values "rc same=$rc_same struct=$rc_struct values=$rc_values: $(grep -m2 'differ\|verdict' "$W/diff-values.out" | xargs)"; fi
# a synth flag the preset's family has no knob for is refused, naming the flag and the
# preset (the build before issue 34 item 4 took --ple for mixtral and wrote the same
# checkpoint as without it); one it has still scales the geometry
$FF synth --arch mixtral --ple 16 "$W/knob-refused" > "$W/knob-refused.out" 2>&1; rc_refused=$?
$FF synth --arch mixtral --sparse --layers 3 "$W/knob-taken" > "$W/knob-taken.out" 2>&1; rc_taken=$?
if [ $rc_refused = 2 ] && [ ! -e "$W/knob-refused" ] \
   && grep -qx 'fp4forge synth: --ple does not apply to --arch mixtral (its family has no such knob)' "$W/knob-refused.out" \
   && [ $rc_taken = 0 ] && grep -q '"num_hidden_layers": 3' "$W/knob-taken/config.json"; then
    pass msg_synth_knob_refused "--ple on mixtral: rc 2, one line naming both; --layers 3 taken"
else fail msg_synth_knob_refused "rc refused=$rc_refused taken=$rc_taken: $(head -2 "$W/knob-refused.out" | xargs)"; fi
exit $GOLDEN_RC

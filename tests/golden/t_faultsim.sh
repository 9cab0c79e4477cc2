#!/usr/bin/env bash
# Allocation failures injected one by one (issue 35; SQLite's faultsim):
# each command runs once to count its allocations, then again with the Nth
# failing, for every N. Twice: fp4forge's own allocations (every one), then
# with jansson's inside its parser and dumper too (an even sample plus the
# first 40; FP4FORGE_FAULTSIM_FULL=1 for all), where jansson 2.14's own
# crash (its lexer ignores a failed buffer growth and walks past the buffer:
# akheron/jansson#362, fix open as #747) is counted apart, not failed: no
# caller can defend against it. What a caller can defend (a character
# dropped from a value, a corrupt dump) is refused by src/base/jsonio.c. Every run must end cleanly: exit 0 with
# the reference output, or exit 1 with one message (a plan or doctor
# refusal, exit 3 or 4, when it says out of memory); never a verdict (verify
# and diff exit 6, a PASS that skipped a check); no sanitizer report (a leak
# on an error path is one), no crash, nothing left at OUT.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/faultsim; rm -rf "$W"; mkdir -p "$W"
FS=${FF_FAULTSIM:-$(dirname "$FF")/fp4forge-faultsim}
[ -x "$FS" ] || { fail faultsim_binary "no $FS (make $FS)"; exit 1; }
SAMPLE=${FP4FORGE_FAULTSIM_SAMPLE:-60}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

$FF_FAST synth --arch qwen3-moe --hidden 64 --intermediate 64 --moe-intermediate 32 --vocab 256 --head-dim 16 \
    --layers 2 --experts 4 "$W/in" > /dev/null || { fail faultsim_setup; exit 1; }
$FF_FAST quantize --quiet --threads 1 "$W/in" "$W/q" > /dev/null || { fail faultsim_setup_quantize; exit 1; }
python3 "$(dirname "$0")/make_adapter.py" "$W/in" model.layers.0.self_attn.q_proj "$W/adapter"
insum() { (cd "$W" && find in q adapter -type f | LC_ALL=C sort | xargs sha256sum) | sha256sum; }
IN_SUM=$(insum)

# one_run TAG REF N OUT CMD...: CMD with the Nth allocation failing (its files
# named after TAG, its output compared with REF); prints why the run is not
# clean, nothing when it is
one_run() {
    local name=$1 ref=$2 n=$3 out=$4; shift 4
    rm -rf "$out" "$out".partial-* "$out".doctor-*
    FF_FAULTSIM=$n FF_FAULTSIM_REPORT="$W/$name.rep" "$FS" "$@" > "$W/$name.stdout" 2> "$W/$name.stderr"
    local rc=$?
    if [ "${FF_FAULTSIM_JANSSON:-0}" = 1 ] && grep -q "^    #0 0x[0-9a-f]* *(/[^ ]*libjansson" "$W/$name.stderr"; then
        echo "$n" >> "$W/jansson-crashes"
    elif grep -q "Sanitizer\|runtime error" "$W/$name.stderr"; then
        echo "N=$n: $(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|runtime error: .*' "$W/$name.stderr" | head -1)"
        cp "$W/$name.stderr" "$W/$name.fail-$n.stderr"
    elif [ $rc -ne 0 ] && [ $rc -ne 1 ] && ! { [ $rc -le 4 ] && grep -q "out of memory" "$W/$name.stderr"; }; then
        echo "N=$n: exit $rc: $(tail -1 "$W/$name.stderr")"
    elif [ -n "$out" ] && ls -d "$out".partial-* "$out".doctor-* > /dev/null 2>&1; then
        echo "N=$n: exit $rc left a staging folder"
    elif [ -n "$out" ] && [ $rc -ne 0 ] && [ -e "$out" ]; then
        echo "N=$n: exit $rc but $out exists"
    elif [ -n "$out" ] && [ $rc -eq 0 ] && ! bash "$(dirname "$0")/../same_output.sh" "$out" "$ref" > /dev/null; then
        echo "N=$n: exit 0 with an output that differs from the reference"
    elif [ $rc -eq 1 ] && [ "$(wc -l < "$W/$name.stderr")" -gt 3 ]; then
        echo "N=$n: exit 1 with $(wc -l < "$W/$name.stderr") lines"
    fi
    [ -f "$W/$name.rep" ] && sed -n 's/^failed_site //p' "$W/$name.rep" | grep -v '(nil)' >> "$W/sites"
}

# lane NAME OUT K NS CMD...: the failing runs at positions K, K + LANES, ...
# of NS, with their own files and their own OUT (OUT in CMD renamed OUT.lK);
# their reasons to NAME.bad. Each run is one short process: CI's two cores
# take two lanes at once (the tier's longest test, 4 minutes in one lane).
LANES=2
lane() {
    local name=$1 out=$2 k=$3 ns=$4; shift 4
    local lout="" a args=() i=0 bad=0 why
    [ -n "$out" ] && lout="$out.l$k"
    for a in "$@"; do
        [ -n "$out" ] && [ "$a" = "$out" ] && a=$lout
        args+=("$a")
    done
    for n in $ns; do
        i=$((i + 1))
        [ $((i % LANES)) -eq "$k" ] || continue
        why=$(one_run "$name.l$k" "$W/$name.ref" "$n" "$lout" "${args[@]}")
        [ -z "$why" ] && continue
        echo "$why" >> "$W/$name.bad"
        bad=$((bad + 1))
        [ $bad -gt 4 ] && break
    done
}

# countdown NAME OUT CMD...: the reference run, then the failing runs
countdown() {
    local name=$1 out=$2; shift 2
    rm -rf "$out"
    if ! FF_FAULTSIM=0 FF_FAULTSIM_REPORT="$W/$name.rep" "$FS" "$@" > /dev/null 2> "$W/$name.ref.stderr"; then
        fail "faultsim_$name" "the run without failures failed: $(tail -1 "$W/$name.ref.stderr")"; return
    fi
    [ -n "$out" ] && rm -rf "$W/$name.ref" && mv "$out" "$W/$name.ref"
    local total ns k
    total=$(sed -n 's/^allocations //p' "$W/$name.rep")
    if [ "${FF_FAULTSIM_JANSSON:-0}" = 0 ] || [ "${FP4FORGE_FAULTSIM_FULL:-0}" = 1 ] || [ "$total" -le $((SAMPLE + 40)) ]; then
        ns=$(seq 1 "$total")
    else ns=$( (seq 1 40; seq 41 $(((total - 40) / SAMPLE + 1)) "$total") | sort -nu); fi
    : > "$W/$name.bad"
    for k in $(seq 0 $((LANES - 1))); do lane "$name" "$out" "$k" "$ns" "$@" & done
    wait
    local runs; runs=$(echo "$ns" | wc -w)
    if [ ! -s "$W/$name.bad" ]; then pass "faultsim_$name$SUFFIX" "$runs of $total allocations failed one at a time, each a clean exit"
    else fail "faultsim_$name$SUFFIX" "$(head -5 "$W/$name.bad" | tr '\n' ';' | sed 's/;$//; s/;/; /g')"; fi
}

: > "$W/sites"; : > "$W/jansson-crashes"
all_commands() {
    countdown quantize "$W/o-q" quantize --quiet --threads 1 "$W/in" "$W/o-q"
    countdown verify "" verify "$W/q" --against "$W/in"
    countdown dequantize "$W/o-d" dequantize "$W/q" "$W/o-d"
    countdown doctor "" doctor "$W/in"
    countdown repair_scales "$W/o-r" repair-scales "$W/q" "$W/o-r"
    countdown merge "$W/o-m" merge "$W/in" "$W/adapter" "$W/o-m"
}
SUFFIX="" FF_FAULTSIM_JANSSON=0 all_commands
# a vendor-quantized source (gpt-oss's MXFP4 layout: the decoded view, its
# slices of fused experts, the exact route), fp4forge's own allocations only
$FF_FAST synth --arch gpt-oss-20b "$W/oss" > /dev/null || fail faultsim_setup_gptoss
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown quantize_gptoss_mxfp4 "$W/o-oss" quantize --quiet --threads 1 "$W/oss" "$W/o-oss"
# an FP8-block source decoded a task's rows at a time into each thread's scratch
$FF_FAST synth --arch kimi-k2 --source fp8-block --layers 2 --experts 2 "$W/fp8" > /dev/null || fail faultsim_setup_fp8
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown quantize_fp8_block "$W/o-fp8" quantize --quiet --threads 2 "$W/fp8" "$W/o-fp8"
# a compressed-tensors INT4 source: each weight's scale tops, its amax from them
$FF_FAST synth --arch kimi-k2 --source int4 --layers 2 --experts 2 "$W/int4" > /dev/null || fail faultsim_setup_int4
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown quantize_int4 "$W/o-int4" quantize --quiet --threads 2 "$W/int4" "$W/o-int4"
# units of 2^18 elements and more on 2 threads: an FP8-block unit's amax taken in the
# previous unit's pass (ahead), and MXFP4 codes queued to the writers' turns
$FF_FAST synth --arch kimi-k2 --source fp8-block --layers 2 --experts 2 --hidden 512 --moe-intermediate 1024 \
    --intermediate 1024 "$W/fp8m" > /dev/null || fail faultsim_setup_fp8m
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown quantize_fp8_ahead "$W/o-fp8m" quantize --quiet --threads 2 "$W/fp8m" "$W/o-fp8m"
$FF_FAST synth --arch kimi-k2 --source mxfp4 --layers 2 --experts 2 --hidden 512 --moe-intermediate 1024 \
    --intermediate 1024 "$W/mxm" > /dev/null || fail faultsim_setup_mxm
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown quantize_mxfp4_queued "$W/o-mxm" quantize --quiet --threads 2 "$W/mxm" "$W/o-mxm"
# a family as data for an architecture no built-in family claims (issue 37):
# the description inferred, parsed (as --family-file's is) and planned
cp -r "$W/in" "$W/unk" && sed -i 's/"model_type": "qwen3_moe"/"model_type": "brandnew_moe"/' "$W/unk/config.json"
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown plan_infer "" plan "$W/unk" --infer
# and through a quantized source's per-expert view (gpt-oss's MXFP4 blocks)
SUFFIX="" FF_FAULTSIM_JANSSON=0 countdown plan_infer_mxfp4 "" plan "$W/oss" --infer
own_sites=$(sort -u "$W/sites" | wc -l)
SUFFIX=_with_jansson FF_FAULTSIM_JANSSON=1 all_commands
[ "$(insum)" = "$IN_SUM" ] && pass faultsim_inputs_unchanged || fail faultsim_inputs_unchanged
echo "faultsim: $own_sites distinct allocation sites of fp4forge failed; $(sort -u "$W/sites" | wc -l) with jansson's;" \
     "$(wc -l < "$W/jansson-crashes") runs ended in jansson 2.14's own crash (akheron/jansson#362)"
exit $GOLDEN_RC

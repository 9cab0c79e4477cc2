# Shared helpers for t_core.sh / t_moe.sh (sourced, not run).
FF=${FF:-build/fp4forge}
WORK=${WORK:-build/conformance-work}
PY=${PY:?PY must name the conformance venv python}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
CONF=tests/conformance
FIX=${FP4FORGE_FIXTURES:-/work/shared/fixtures}
rc=0
# pyrun LABEL LOGDIR SCRIPT ARGS...: stdout (PASS/FAIL lines) shown, stderr kept in
# LOGDIR/LABEL.err; a script that dies without a verdict line gets a FAIL line.
pyrun() {
    local label=$1 logdir=$2; shift 2
    local out; out=$("$PY" "$@" 2> "$logdir/$label.err"); local st=$?
    [ -n "$out" ] && echo "$out"
    if [ $st -ne 0 ]; then
        rc=1
        if ! grep -q '^FAIL ' <<< "$out"; then
            echo "FAIL ${label}_crashed (exit $st; $(tail -1 "$logdir/$label.err" | cut -c1-200); see $logdir/$label.err)"
        fi
    fi
    return 0
}
# unpack FIXTURE DEST: the fixture's checkpoint dir lands in DEST
unpack() {
    mkdir -p "$2.tmp" && tar xzf "$FIX/$1.tar.gz" -C "$2.tmp" && mv "$2.tmp/$1" "$2" && rmdir "$2.tmp"
}
# quantize_and_threads NAME SRC OUT: fp4forge quantize --no-doctor (doctor has its own tier; the
# fixtures lack processor files on purpose) at --threads 2 (OUT) and 1 (OUT.t1),
# then every output file must be byte-identical
quantize_and_threads() {
    local name=$1 src=$2 out=$3
    if ! "$FF" quantize "$src" "$out" --threads 2 --no-doctor > "$out.log" 2>&1; then
        echo "FAIL ${name}_ff_quantize ($(tail -1 "$out.log"))"; rc=1; return 1
    fi
    echo "PASS ${name}_ff_quantize ($(grep -m1 quantized "$out.log" | sed 's/^ *//'))"
    if ! "$FF" quantize "$src" "$out.t1" --threads 1 --no-doctor > "$out.t1.log" 2>&1; then
        echo "FAIL ${name}_threads_1_vs_2_identical (--threads 1 failed: $(tail -1 "$out.t1.log"))"; rc=1; return 0
    fi
    local n bad
    n=$(ls "$out" | wc -l)
    # the card names its OUT in the serve line; tests/same_output.sh says so
    bad=$(bash "$(dirname "${BASH_SOURCE[0]}")/../same_output.sh" "$out" "$out.t1")
    if [ -z "$bad" ]; then echo "PASS ${name}_threads_1_vs_2_identical ($n files cmp-identical)"
    else echo "FAIL ${name}_threads_1_vs_2_identical (differ:$bad)"; rc=1; fi
}
# dequantize Q OUT: prints OUT's path when fp4forge dequantize exists and succeeded
dequantize() {
    if "$FF" dequantize "$1" "$2" > "$2.log" 2>&1; then echo "$2"; return 0; fi
    if grep -qi "unknown command\|not implemented" "$2.log"; then
        echo "SKIP ${3}_ff_dequantize (fp4forge dequantize not available: $(head -1 "$2.log" | cut -c1-120))" >&2
    else
        echo "FAIL ${3}_ff_dequantize ($(tail -1 "$2.log" | cut -c1-200))" >&2; rc=1
    fi
    return 1
}

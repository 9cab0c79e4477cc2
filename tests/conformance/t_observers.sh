#!/usr/bin/env bash
# Conformance (issue 16 parts 1-3): fp4forge quantize --observer mse | expanded-mse against
# llm-compressor 0.14's NVFP4A16 oneshot with the same weight observer (memoryless_mse,
# nvfp4_expanded_mse; llmc_quantize_observer.py), on the tiny Gemma-4 dense and MoE
# fixtures and a tiny Llama (make_tiny_llama.py). Per model and observer:
#   *_ff_quantize / *_threads_1_vs_2_identical   (conf_lib.sh; deterministic across threads)
#   *_kernel_scalar_identical                    --kernel scalar gives the same files
#   *_llmc_*                                     llmc_compare.py: packed/scale/global-scale
#                                                bytes, other tensors, quantization_config
#                                                (observer recorded as llm-compressor does)
#   *_classes_<proj>                             the same match fractions per tensor class
#   *_weight_error                               mean relative error / SNR vs the bf16 source,
#                                                minmax vs mse vs expanded-mse (figures)
# plus default_unchanged: --observer minmax gives files byte-identical to no --observer,
# and a synthetic edge-case model (below).
# Env: ONLY="gemma_dense gemma_moe llama synth" (default all) picks models.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL observers_ff_binary (no $FF; run make)"; exit 1; }
OBS="mse:memoryless_mse expanded-mse:nvfp4_expanded_mse"

# cmp_dirs NAME A B: every file of A and B byte-identical
cmp_dirs() {
    local bad n
    n=$(ls "$2" | wc -l)
    bad=$(bash "$(dirname "$0")/../same_output.sh" "$2" "$3")
    if [ -z "$bad" ]; then echo "PASS $1 ($n files cmp-identical)"; else echo "FAIL $1 (differ:$bad)"; rc=1; fi
}

run_model() {   # NAME SRC CAUSAL(0|1)
    local name=$1 src=$2 causal=$3 RUNNER=()
    local D=$WORK/$name
    [ "$causal" = 1 ] && RUNNER=($CONF/causal_lm.py)
    "$FF" quantize "$src" "$D/ff-minmax" --threads 2 --no-doctor --quiet > "$D/ff-minmax.log" 2>&1 ||
        { echo "FAIL ${name}_ff_quantize_minmax ($(tail -1 "$D/ff-minmax.log"))"; rc=1; }
    "$FF" quantize "$src" "$D/ff-minmax-flag" --observer minmax --threads 2 --no-doctor --quiet > "$D/ff-minmax-flag.log" 2>&1 ||
        { echo "FAIL ${name}_ff_quantize_observer_minmax ($(tail -1 "$D/ff-minmax-flag.log"))"; rc=1; }
    cmp_dirs ${name}_default_unchanged "$D/ff-minmax" "$D/ff-minmax-flag"
    local ERRS=("minmax=$D/ff-minmax")
    for pair in $OBS; do
        local ob=${pair%%:*} lc=${pair##*:}
        local O=$D/$ob
        mkdir -p "$O"
        if ! "$FF" quantize "$src" "$O/ff" --observer $ob --threads 2 --no-doctor > "$O/ff.log" 2>&1; then
            echo "FAIL ${name}_${ob}_ff_quantize ($(tail -1 "$O/ff.log"))"; rc=1; continue
        fi
        echo "PASS ${name}_${ob}_ff_quantize ($(grep -m1 time "$O/ff.log" | sed 's/^ *//'))"
        "$FF" quantize "$src" "$O/ff.t1" --observer $ob --threads 1 --no-doctor --quiet > "$O/ff.t1.log" 2>&1
        cmp_dirs ${name}_${ob}_threads_1_vs_2_identical "$O/ff" "$O/ff.t1"
        "$FF" quantize "$src" "$O/ff.scalar" --observer $ob --kernel scalar --threads 2 --no-doctor --quiet > "$O/ff.scalar.log" 2>&1
        cmp_dirs ${name}_${ob}_kernel_scalar_identical "$O/ff" "$O/ff.scalar"
        # the search must actually choose something else than min/max somewhere
        local nd; nd=$(cmp -l "$D/ff-minmax/model.safetensors" "$O/ff/model.safetensors" 2>/dev/null | wc -l)
        if [ "$nd" -gt 0 ]; then echo "PASS ${name}_${ob}_differs_from_minmax ($nd bytes differ)"
        else echo "FAIL ${name}_${ob}_differs_from_minmax (output equals min/max)"; rc=1; fi
        local t0=$SECONDS
        pyrun ${name}_${ob}_llmc_quantize "$O" "${RUNNER[@]}" $CONF/llmc_quantize_observer.py "$src" "$O/llmc" $lc > /dev/null
        if [ -f "$O/llmc/model.safetensors" ]; then
            echo "  info: llm-compressor $lc took $((SECONDS - t0)) s (load+oneshot+save)"
            pyrun ${name}_${ob}_llmc "$O" $CONF/llmc_compare.py ${name}_${ob}_llmc "$O/ff" "$O/llmc"
            pyrun ${name}_${ob}_classes "$O" $CONF/llmc_quantize_observer.py --classes ${name}_${ob}_classes "$O/ff" "$O/llmc"
        else
            echo "FAIL ${name}_${ob}_llmc_quantize ($(tail -1 "$O/${name}_${ob}_llmc_quantize.err" | cut -c1-200))"; rc=1
        fi
        ERRS+=("$ob=$O/ff")
        # transformers + compressed-tensors load the observer's output: KL vs bf16
        # (the dense fixture carries its bf16 reference logits)
        if [ "$name" = gemma_dense ] && [ -f "$src/ref_logits.pt" ]; then
            pyrun ${name}_${ob}_hf "$O" $CONF/hf_load_kl.py ${name}_${ob}_hf "$O/ff" "$src/ref_logits.pt" 0.01
        fi
    done
    if [ "$name" = gemma_dense ] && [ -f "$src/ref_logits.pt" ]; then
        pyrun ${name}_minmax_hf "$D" $CONF/hf_load_kl.py ${name}_minmax_hf "$D/ff-minmax" "$src/ref_logits.pt" 0.01
    fi
    pyrun ${name}_error "$D" $CONF/llmc_quantize_observer.py --error $name "$src" "${ERRS[@]}"
}

ONLY=${ONLY:-gemma_dense gemma_moe llama synth}
want() { [[ " $ONLY " == *" $1 "* ]]; }
D=$WORK/gemma_dense
if ! want gemma_dense; then :
elif rm -rf "$D" && mkdir -p "$D" && unpack gemma4-tiny-dense "$D/src"; then run_model gemma_dense "$D/src" 0
else echo "FAIL gemma_dense_fixture_unpack"; rc=1; fi

D=$WORK/gemma_moe
if ! want gemma_moe; then :
elif ! rm -rf "$D" || ! mkdir -p "$D"; then rc=1
elif [ ! -f "$FIX/gemma4-tiny-moe.tar.gz" ]; then echo "SKIP gemma_moe (no fixture)"
elif unpack gemma4-tiny-moe "$D/src"; then run_model gemma_moe "$D/src" 0
else echo "FAIL gemma_moe_fixture_unpack"; rc=1; fi

D=$WORK/llama
if want llama || want synth; then
    rm -rf "$D"; mkdir -p "$D"
    pyrun llama_make "$D" $CONF/make_tiny_llama.py llama "$D/src" > /dev/null
    if [ ! -f "$D/src/model.safetensors" ]; then echo "FAIL llama_make ($(tail -1 "$D/llama_make.err" | cut -c1-200))"; rc=1
    elif want llama; then run_model llama "$D/src" 1; fi
fi
# Edge cases on the tiny Llama's geometry (llmc_quantize_observer.py --synth): heavy tails,
# zero/constant groups, subnormal local scales, an overflowing global scale, FP4-grid ties,
# an all-zero tensor, and groups on which llm-compressor's tensor-wide early stop fires
# (--stopcheck proves it changes groups there).
D=$WORK/synth
if want synth && [ -f "$WORK/llama/src/model.safetensors" ]; then
    rm -rf "$D"; mkdir -p "$D"
    pyrun synth_make "$D" $CONF/llmc_quantize_observer.py --synth "$WORK/llama/src" "$D/src" > /dev/null
    pyrun synth_stopcheck "$D" $CONF/llmc_quantize_observer.py --stopcheck synth "$D/src"
    [ -f "$D/src/model.safetensors" ] && run_model synth "$D/src" 1
fi
exit $rc

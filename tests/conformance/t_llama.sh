#!/usr/bin/env bash
# Conformance: the Llama-style dense family (arch_llama.c) on tiny random checkpoints
# saved by transformers 5.17 (make_tiny_llama.py): llama; qwen2 (q/k/v biases);
# qwen3 (q_norm/k_norm, tied lm_head). Per model, the same oracles as t_core.sh:
# fp4forge quantize (with doctor: text-only input needs no processor files),
# --threads 1 vs 2 identity, ct_match.py (CT's compressor bytes, CT's decompressor vs
# fp4forge dequantize), llmc_compare.py (tensor-by-tensor vs llm-compressor's NVFP4A16
# data-free output, ignore sets) and hf_load_kl.py (transformers + CT load, finite
# logits, KL vs bf16, logits equal to llm-compressor's). The Gemma-4 scripts load via
# AutoModelForImageTextToText; causal_lm.py runs them with AutoModelForCausalLM.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL llama_ff_binary (no $FF; run make)"; exit 1; }
for arch in llama qwen2 qwen3; do
    D=$WORK/$arch; rm -rf "$D"; mkdir -p "$D"
    pyrun ${arch}_make "$D" $CONF/make_tiny_llama.py $arch "$D/src" > /dev/null
    [ -f "$D/src/model.safetensors" ] || { echo "FAIL ${arch}_make ($(tail -1 "$D/${arch}_make.err" | cut -c1-200))"; rc=1; continue; }
    if "$FF" quantize --quiet "$D/src" "$D/ff-doctor" > "$D/ff-doctor.log" 2>&1; then
        echo "PASS ${arch}_ff_quantize_with_doctor ($(grep -m1 quantized "$D/ff-doctor.log" | sed 's/^ *//'))"
    else echo "FAIL ${arch}_ff_quantize_with_doctor ($(tail -1 "$D/ff-doctor.log"))"; rc=1; fi
    quantize_and_threads $arch "$D/src" "$D/ff" || continue
    DEQ=$(dequantize "$D/ff" "$D/ff-deq" $arch) || DEQ=
    pyrun ${arch}_ct "$D" $CONF/ct_match.py $arch "$D/src" "$D/ff" $DEQ
    pyrun ${arch}_llmc_quantize "$D" $CONF/causal_lm.py $CONF/llmc_quantize.py "$D/src" "$D/llmc" > /dev/null
    if [ -f "$D/llmc/model.safetensors" ]; then
        pyrun ${arch}_llmc "$D" $CONF/llmc_compare.py ${arch}_llmc "$D/ff" "$D/llmc"
        PEER=(--peer "$D/llmc")
    else
        echo "FAIL ${arch}_llmc_quantize ($(tail -1 "$D/${arch}_llmc_quantize.err" | cut -c1-200))"; rc=1; PEER=()
    fi
    # KL threshold 0.002: measured 0.00015-0.0003; a dead (uniform) model scores ~0.013
    pyrun ${arch}_hf "$D" $CONF/causal_lm.py $CONF/hf_load_kl.py ${arch}_hf "$D/ff" "$D/src/ref_logits.pt" 0.002 \
        --bf16 "$D/src" "${PEER[@]}"
done
exit $rc

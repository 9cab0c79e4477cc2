#!/usr/bin/env bash
# Conformance: Kimi-K2.5 / K2.6 (kimi_k25: MoonViT + projector over a DeepSeek-V3 text model
# under language_model.) on a tiny random Kimi_K25ForConditionalGeneration saved by
# transformers 5.17 under the published names; its INT4 source (routed experts, pack-quantized
# group 32) written by llm-compressor 0.14 with the Kimi-K2.6 ignore list and
# text_config.quantization_config. fp4forge's decode bit-exact to compressed-tensors', its one
# pass byte-identical to quantizing the reference bf16 copy and to llm-compressor's NVFP4A16
# of that copy (its Kimi-K2.6 example's ignore list), and vLLM 0.32 CPU prompt logprobs of the
# NVFP4 output equal to those of `fp4forge dequantize`'s copy (t_kimi_k25.py says how).
# ~1 min on 2 cores, the vLLM step ~1 min more.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL kimi_k25_ff_binary (no $FF; run make)"; exit 1; }
D=$WORK/kimi-k25; rm -rf "$D"; mkdir -p "$D"
pyrun kimi_k25 "$D" $CONF/t_kimi_k25.py "$FF" "$D"
# llm-compressor 0.14's NVFP4A16 of the reference bf16 copy vs fp4forge's one pass over the
# INT4 source; llm-compressor's names mapped back to the published ones first (DST-pub)
if [ -f "$D/int4-ref-bf16/model.safetensors" ] && [ -d "$D/ff-q" ]; then
    pyrun kimi_k25_llmc_quantize "$D" $CONF/t_kimi_k25.py llmc "$D/int4-ref-bf16" "$D/llmc"
    if [ -f "$D/llmc-pub/model.safetensors" ]; then
        pyrun kimi_k25_llmc "$D" $CONF/llmc_compare.py kimi_k25_llmc "$D/ff-q" "$D/llmc-pub"
    else echo "FAIL kimi_k25_llmc_quantize ($(tail -1 "$D/kimi_k25_llmc_quantize.err" | cut -c1-200))"; rc=1; fi
fi
# vLLM's CPU build (its own venv, with the test plugin t_vllm.sh installs) on the one-pass output
VENV=${FP4FORGE_VLLM_VENV:-/var/tmp/fp4forge-vllm-venv}
if [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ] || [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import fp4forge_vllm_cpu_nvfp4' 2> /dev/null; then
    echo "SKIP kimi_k25_vllm (no vLLM venv with the test plugin at $VENV: run t_vllm.sh first)"
elif [ -d "$D/ff-q" ]; then
    if ! "$FF" dequantize "$D/ff-q" "$D/ff-q-dq" > "$D/dq.log" 2>&1; then
        echo "FAIL kimi_k25_dequantize ($(tail -1 "$D/dq.log" | cut -c1-200))"; rc=1
    else
        out=$(timeout 2400 "$VENV/bin/python" $CONF/t_kimi_k25.py vllm "$D/ff-q" "$D/ff-q-dq" 2> "$D/vllm.err"); st=$?
        [ -n "$out" ] && echo "$out"
        if [ $st -ne 0 ]; then
            rc=1
            grep -q '^FAIL ' <<< "$out" || echo "FAIL kimi_k25_vllm_crashed (exit $st; $(tail -1 "$D/vllm.err" | cut -c1-200))"
        fi
    fi
else
    echo "FAIL kimi_k25_vllm (no one-pass output $D/ff-q: see kimi_k25_one_pass_equals_reference_copy)"; rc=1
fi
exit $rc

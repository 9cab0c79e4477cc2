#!/usr/bin/env bash
# Conformance: FP8-block sources (DeepSeek-V3 layout) decoded bit-exactly as
# transformers 5.17's Fp8Dequantize and DeepSeek's weight_dequant, and one pass
# over the FP8 source byte-identical to quantizing the reference bf16 copy
# (t_deepseek_fp8.py says how the FP8 checkpoint is made; docs/deepseek-fp8.md).
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL deepseek_fp8_ff_binary (no $FF; run make)"; exit 1; }
D=$WORK/deepseek-fp8; rm -rf "$D"; mkdir -p "$D"
pyrun deepseek_fp8 "$D" $CONF/t_deepseek_fp8.py "$FF" "$D"
# llm-compressor 0.14 on the reference bf16 copy vs fp4forge's one pass over the FP8 source
if [ -f "$D/ref-bf16/model.safetensors" ] && [ -d "$D/ff-q-fp8" ]; then
    pyrun deepseek_fp8_llmc_quantize "$D" $CONF/t_deepseek_fp8.py llmc "$D/ref-bf16" "$D/llmc" > /dev/null
    if [ -f "$D/llmc/model.safetensors" ]; then
        pyrun deepseek_fp8_llmc "$D" $CONF/llmc_compare.py deepseek_fp8_llmc "$D/ff-q-fp8" "$D/llmc"
    else echo "FAIL deepseek_fp8_llmc_quantize ($(tail -1 "$D/deepseek_fp8_llmc_quantize.err" | cut -c1-200))"; rc=1; fi
fi
# vLLM's CPU build (its own venv, with the test plugin t_vllm.sh installs) on the one-pass output
VENV=${FP4FORGE_VLLM_VENV:-/var/tmp/fp4forge-vllm-venv}
if [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ] || [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import fp4forge_vllm_cpu_nvfp4' 2> /dev/null; then
    echo "SKIP deepseek_fp8_vllm (no vLLM venv with the test plugin at $VENV: run t_vllm.sh first)"
elif [ -d "$D/ff-q-fp8-mla576" ]; then
    "$FF" dequantize "$D/ff-q-fp8-mla576" "$D/ff-q-fp8-mla576-dq" > "$D/dq.log" 2>&1 || echo "FAIL deepseek_fp8_dequantize ($(tail -1 "$D/dq.log"))"
    out=$(timeout 900 "$VENV/bin/python" $CONF/t_deepseek_fp8.py vllm "$D/ff-q-fp8-mla576" "$D/ff-q-fp8-mla576-dq" 2> "$D/vllm.err"); st=$?
    [ -n "$out" ] && echo "$out"
    if [ $st -ne 0 ]; then
        rc=1
        grep -q '^FAIL ' <<< "$out" || echo "FAIL deepseek_fp8_vllm_crashed (exit $st; $(grep -m1 -E 'Error|error' "$D/vllm.err" | cut -c1-200))"
    fi
fi
exit $rc

#!/usr/bin/env bash
# Conformance: gpt-oss's own MXFP4 layout (quant_method "mxfp4": experts' *_blocks/*_scales,
# gate/up rows interleaved). fp4forge's decode bit-exact to transformers 5.17's dequantizer
# split per expert as llm-compressor 0.14 linearizes it; --mxfp4-route reference byte-identical
# to llm-compressor's NVFP4A16 of the dequantized model; the exact route (default) dequantizing
# to the source's values; vLLM 0.32 (CPU) failing to load the NVFP4 output, as it fails on
# llm-compressor's (t_gptoss.py says how; ~2 min on 2 cores, vLLM steps ~1 min more).
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
D=$WORK/gptoss; rm -rf "$D"; mkdir -p "$D"
# no binary: the peers' steps still run, fp4forge's steps FAIL on their own lines
[ -x "$FF" ] || { echo "FAIL gptoss_ff_binary (no $FF; run make)"; rc=1; }
pyrun gptoss "$D" $CONF/t_gptoss.py "$FF" "$D"
# llm-compressor 0.14 on the dequantized model vs fp4forge's reference route over the source
if [ -f "$D/mx/model.safetensors" ] && [ -f "$D/mx-ref-bf16/model.safetensors" ]; then
    pyrun gptoss_llmc_quantize "$D" $CONF/t_gptoss.py llmc "$D/mx" "$D/mx-ref-bf16" "$D/llmc"
    if [ ! -f "$D/llmc/model.safetensors" ]; then
        echo "FAIL gptoss_llmc_quantize ($(tail -1 "$D/gptoss_llmc_quantize.err" | cut -c1-200))"; rc=1
    elif [ -d "$D/ff-q-ref" ]; then
        pyrun gptoss_llmc "$D" $CONF/llmc_compare.py gptoss_llmc "$D/ff-q-ref" "$D/llmc"
    else
        echo "FAIL gptoss_llmc (no fp4forge --mxfp4-route reference output to compare: see gptoss_reference_route_quantize)"; rc=1
    fi
fi
# vLLM's CPU build (its own venv, the test plugin t_vllm.sh installs) on fp4forge's default output
VENV=${FP4FORGE_VLLM_VENV:-/var/tmp/fp4forge-vllm-venv}
if [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ] || [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import fp4forge_vllm_cpu_nvfp4' 2> /dev/null; then
    echo "SKIP gptoss_vllm_refuses (no vLLM venv with the test plugin at $VENV: run t_vllm.sh first)"
elif [ -d "$D/ff-q" ]; then
    out=$(timeout 2000 "$VENV/bin/python" $CONF/t_gptoss.py vllm "$D/ff-q" "$D/llmc" 2> "$D/vllm.err"); st=$?
    [ -n "$out" ] && echo "$out"
    if [ $st -ne 0 ]; then
        rc=1
        grep -q '^FAIL ' <<< "$out" || echo "FAIL gptoss_vllm_crashed (exit $st; $(tail -1 "$D/vllm.err" | cut -c1-200))"
    fi
else
    echo "FAIL gptoss_vllm_refuses (no fp4forge default-route output $D/ff-q: see gptoss_mx_exact_route)"; rc=1
fi
exit $rc

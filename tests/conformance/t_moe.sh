#!/usr/bin/env bash
# Conformance (issue 3): fp4forge on the real tiny Gemma-4 MoE checkpoint (fused
# experts.gate_up_proj [E,2I,H] / experts.down_proj [E,H,I]) saved by transformers 5.17.
# Same checks as t_core.sh; transformers' fused Gemma4TextExperts cannot take per-expert
# quantized tensors, so the load goes through llm-compressor's linearized experts
# (LinearExperts2D) -- hf_direct_probe.py records what plain transformers does.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
D=$WORK/moe; rm -rf "$D"; mkdir -p "$D"
[ -x "$FF" ] || { echo "FAIL moe_ff_binary (no $FF; run make)"; exit 1; }
[ -f "$FIX/gemma4-tiny-moe.tar.gz" ] || { echo "SKIP moe (no fixture $FIX/gemma4-tiny-moe.tar.gz)"; exit 0; }
unpack gemma4-tiny-moe "$D/src" || { echo "FAIL moe_fixture_unpack"; exit 1; }
quantize_and_threads moe "$D/src" "$D/ff" || exit 1
DEQ=$(dequantize "$D/ff" "$D/ff-deq" moe) || DEQ=
# (a) and the llm-compressor run are independent: run them side by side (2 cores)
pyrun moe_ct "$D" $CONF/ct_match.py moe "$D/src" "$D/ff" $DEQ > "$D/ct.out" & ctpid=$!
pyrun moe_llmc_quantize "$D" $CONF/llmc_quantize.py "$D/src" "$D/llmc" > "$D/llmc.out"
wait $ctpid; cat "$D/ct.out"; grep -q '^FAIL ' "$D/ct.out" && rc=1
if [ -f "$D/llmc/model.safetensors" ]; then
    pyrun moe_llmc "$D" $CONF/llmc_compare.py moe_llmc "$D/ff" "$D/llmc"
    PEER=(--peer "$D/llmc")
else
    echo "FAIL moe_llmc_quantize ($(tail -1 "$D/moe_llmc_quantize.err" | cut -c1-200))"; rc=1; PEER=()
fi
pyrun moe_hf "$D" $CONF/hf_load_kl.py moe_hf "$D/ff" "$D/src/ref_logits.pt" 0.01 --linearized --bf16 "$D/src" "${PEER[@]}"
"$PY" $CONF/hf_direct_probe.py "$D/ff" 2> "$D/direct_probe.err" || echo "  info: hf_direct_probe crashed ($(tail -1 "$D/direct_probe.err" | cut -c1-200))"
exit $rc

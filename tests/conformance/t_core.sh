#!/usr/bin/env bash
# Conformance (issues 1/2): fp4forge on the real tiny Gemma-4 dense checkpoint saved by
# transformers 5.17, judged by compressed-tensors, llm-compressor and transformers.
# (a) ct_match.py: CT's own NVFP4 compressor reproduces fp4forge's bytes; CT's
#     decompressor on fp4forge's output equals fp4forge dequantize.
# (b) hf_load_kl.py: loads through transformers + CT with no warning, KL vs bf16.
# (c) llmc_compare.py: tensor-by-tensor vs llm-compressor's NVFP4A16 output, ignore sets.
# plus --threads 1 vs 2 byte identity. See tests/conformance/README.md.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
D=$WORK/core; rm -rf "$D"; mkdir -p "$D"
[ -x "$FF" ] || { echo "FAIL core_ff_binary (no $FF; run make)"; exit 1; }
[ -f "$FIX/gemma4-tiny-dense.tar.gz" ] || { echo "SKIP core (no fixture $FIX/gemma4-tiny-dense.tar.gz)"; exit 0; }
unpack gemma4-tiny-dense "$D/src" || { echo "FAIL core_fixture_unpack"; exit 1; }
quantize_and_threads core "$D/src" "$D/ff" || exit 1
DEQ=$(dequantize "$D/ff" "$D/ff-deq" core) || DEQ=
# (a) and the llm-compressor run are independent: run them side by side (2 cores)
pyrun core_ct "$D" $CONF/ct_match.py core "$D/src" "$D/ff" $DEQ > "$D/ct.out" & ctpid=$!
pyrun core_llmc_quantize "$D" $CONF/llmc_quantize.py "$D/src" "$D/llmc" > "$D/llmc.out"
wait $ctpid; cat "$D/ct.out"; grep -q '^FAIL ' "$D/ct.out" && rc=1
if [ -f "$D/llmc/model.safetensors" ]; then
    pyrun core_llmc "$D" $CONF/llmc_compare.py core_llmc "$D/ff" "$D/llmc"
    PEER=(--peer "$D/llmc")
else
    echo "FAIL core_llmc_quantize ($(tail -1 "$D/core_llmc_quantize.err" | cut -c1-200))"; rc=1; PEER=()
fi
# KL threshold 0.01: measured 0.0060 (dense), 0.0083 (MoE); see README for why it is tight
pyrun core_hf "$D" $CONF/hf_load_kl.py core_hf "$D/ff" "$D/src/ref_logits.pt" 0.01 --bf16 "$D/src" "${PEER[@]}"
exit $rc

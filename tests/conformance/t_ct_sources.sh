#!/usr/bin/env bash
# Conformance: compressed-tensors INT4 pack-quantized (W4A16 group 32 symmetric, routed
# experts only, Kimi-K2.5's layout) and MXFP4 (mxfp4-pack-quantized) sources, both written
# by llm-compressor 0.14 from a tiny DeepSeek-V3: fp4forge's decode bit-exact to
# compressed-tensors' decompressor, its one pass byte-identical to quantizing the
# reference bf16 copy, hostile sources refused (t_ct_sources.py says how). ~20 s on 2 cores.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL ct_sources_ff_binary (no $FF; run make)"; exit 1; }
D=$WORK/ct-sources; rm -rf "$D"; mkdir -p "$D"
pyrun ct_sources "$D" $CONF/t_ct_sources.py "$FF" "$D"
# llm-compressor 0.14's NVFP4A16 of each reference bf16 copy vs fp4forge's one pass over
# the quantized source (equal to fp4forge on the copy when ct_sources_*_one_pass passed)
for fmt in int4 mxfp4; do
    [ -f "$D/$fmt-ref-bf16/model.safetensors" ] && [ -d "$D/ff-q-$fmt" ] || continue
    pyrun ct_sources_${fmt}_llmc_quantize "$D" $CONF/t_ct_sources.py llmc "$D/$fmt-ref-bf16" "$D/llmc-$fmt" > /dev/null
    if [ -f "$D/llmc-$fmt/model.safetensors" ]; then
        pyrun ct_sources_${fmt}_llmc "$D" $CONF/llmc_compare.py ct_sources_${fmt}_llmc "$D/ff-q-$fmt" "$D/llmc-$fmt"
    else echo "FAIL ct_sources_${fmt}_llmc_quantize ($(tail -1 "$D/ct_sources_${fmt}_llmc_quantize.err" | cut -c1-200))"; rc=1; fi
done
exit $rc

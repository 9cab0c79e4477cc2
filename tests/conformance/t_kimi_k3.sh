#!/usr/bin/env bash
# Conformance: Kimi-K3 (kimi_k3) against llm-compressor 0.14's own Kimi-K3 modeling code
# (llmcompressor.modeling.kimi_k3) on CPU, all-MLA (KDA layers need fla, absent):
# fp4forge's plan counts on a tiny model the peer saves; llm-compressor's NVFP4A16 oneshot
# with its K3 example's recipe == fp4forge --only the routed experts; with every Linear
# vLLM quantizes == fp4forge's default but for the MLA g_proj global scale, which
# llm-compressor leaves untied from q_a/kv_a (vLLM fuses the three: theirs) and which,
# tied in llm-compressor too, makes the outputs byte-identical; an MXFP4 source written by
# llm-compressor decoded bit-exactly, its reference-route one pass == fp4forge (and
# llm-compressor) on the reference bf16 copy, its exact route lossless; transformers +
# compressed-tensors load fp4forge's output and give llm-compressor's logits
# (t_kimi_k3.py says how). ~90 s on 2 cores, most of it importing the peers.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL k3_ff_binary (no $FF; run make)"; exit 1; }
D=$WORK/kimi-k3; rm -rf "$D"; mkdir -p "$D"
pyrun k3 "$D" $CONF/t_kimi_k3.py "$FF" "$D"
[ -f "$D/bf16/model.safetensors" ] || exit 1
# llmc_run RECIPE SRC DST: llm-compressor's oneshot, a fresh process each
llmc_run() {
    local label; label=k3_$(basename "$3" | tr - _)
    pyrun "$label" "$D" $CONF/t_kimi_k3.py llmc "$2" "$3" "$1" > /dev/null
    [ -f "$3/model.safetensors" ] && return 0
    echo "FAIL ${label}_quantize ($(tail -1 "$D/$label.err" | cut -c1-200))"; rc=1; return 1
}
if llmc_run example "$D/bf16" "$D/llmc-example" && [ -d "$D/ff-q-experts" ]; then
    pyrun k3_targets "$D" $CONF/t_kimi_k3.py targets "$D/ff-q-experts" "$D/llmc-example" "$D/llmc-example-t"
    [ -f "$D/llmc-example-t/config.json" ] &&
        pyrun k3_example "$D" $CONF/llmc_compare.py k3_example "$D/ff-q-experts" "$D/llmc-example-t"
fi
if llmc_run full "$D/bf16" "$D/llmc-full" && llmc_run full-gfused "$D/bf16" "$D/llmc-full-gfused" && [ -d "$D/ff-q" ]; then
    pyrun k3_full_gfused "$D" $CONF/llmc_compare.py k3_full_gfused "$D/ff-q" "$D/llmc-full-gfused"
    pyrun k3_explain "$D" $CONF/t_kimi_k3.py explain "$D/ff-q" "$D/llmc-full" "$D/llmc-full-gfused"
    pyrun k3_hfload "$D" $CONF/t_kimi_k3.py hfload "$D/bf16" "$D/ff-q" "$D/llmc-full-gfused"
fi
# the MXFP4 source's reference bf16 copy through llm-compressor vs fp4forge's one pass
# over the source (reference route)
if [ -f "$D/mxfp4-ref-bf16/model.safetensors" ] && [ -d "$D/ff-q-mx-ref" ] &&
   llmc_run full-gfused "$D/mxfp4-ref-bf16" "$D/llmc-mx"; then
    pyrun k3_mxfp4_llmc "$D" $CONF/llmc_compare.py k3_mxfp4_llmc "$D/ff-q-mx-ref" "$D/llmc-mx"
fi
exit $rc

#!/usr/bin/env bash
# Conformance: the MoE families (qwen3_moe, qwen2_moe, mixtral, glm4_moe, llama4) and the 2026
# ones (qwen3_5_moe with its vision tower, qwen3_5 dense, qwen3_next, minimax_m2,
# glm4_moe_lite, deepseek_v32, glm_moe_dsa, llama4_text) on
# tiny random models saved by transformers 5.17 (make_tiny_moe_families.py). Per model:
# fp4forge quantize, --threads 1 vs 2 identity, ct_match.py (compressed-tensors'
# compressor on the same bf16 weights, its fused observer groups; its decompressor vs
# fp4forge dequantize), llmc_compare.py against llm-compressor 0.14's NVFP4A16 oneshot
# with its example's ignore list, and hf_load_kl.py (transformers + CT load, KL vs bf16,
# logits equal to llm-compressor's output's).
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL moe_families_ff_binary (no $FF; run make)"; exit 1; }
ALL="qwen3_moe qwen2_moe mixtral glm4_moe llama4 qwen3_5_moe qwen3_5 qwen3_next minimax_m2 glm4_moe_lite deepseek_v32
     glm_moe_dsa llama4_text"
for fam in ${FP4FORGE_MOE_FAMILIES:-$ALL}; do
    D=$WORK/$fam; rm -rf "$D"; mkdir -p "$D"
    pyrun ${fam}_make "$D" $CONF/make_tiny_moe_families.py $fam "$D/src" > /dev/null
    [ -f "$D/src/model.safetensors" ] || { echo "FAIL ${fam}_make ($(tail -1 "$D/${fam}_make.err" | cut -c1-200))"; rc=1; continue; }
    quantize_and_threads $fam "$D/src" "$D/ff" || continue
    DEQ=$(dequantize "$D/ff" "$D/ff-deq" $fam) || DEQ=
    export CT_TRANSPOSED_EXPERTS=$(case $fam in llama4|llama4_text) echo 1;; *) echo 0;; esac)
    pyrun ${fam}_ct "$D" $CONF/ct_match.py $fam "$D/src" "$D/ff" $DEQ
    pyrun ${fam}_llmc_quantize "$D" $CONF/llmc_quantize_moe.py $fam "$D/src" "$D/llmc" > /dev/null
    # text-only families load as causal LMs under llm-compressor's linearized
    # experts: transformers 5.17 builds them as fused 3-D experts, which have no
    # place for per-expert packed weights and scales (llm-compressor's output
    # loads the same way); Llama-4 as the image-text model it is
    WRAP=($CONF/causal_lm.py); LIN=(--linearized); [ $fam = llama4 ] && WRAP=() && LIN=()
    [ $fam = qwen3_5_moe ] && WRAP=()
    [ $fam = llama4_text ] && LIN=()
    # Qwen3.5 / Qwen3-Next norms compute x * (1 + w): llm-compressor round-trips w through
    # bf16(1 + w) (llmc_compare.py --offset-norms says how, and checks it bit for bit)
    OFFSET=(); PEER_NORMS=(); case $fam in qwen3_5*|qwen3_next) OFFSET=(--offset-norms); PEER_NORMS=(--peer-offset-norms);; esac
    if [ -f "$D/llmc/model.safetensors" ]; then
        pyrun ${fam}_llmc "$D" $CONF/llmc_compare.py ${fam}_llmc "$D/ff" "$D/llmc" "${OFFSET[@]}"
        PEER=(--peer "$D/llmc" "${PEER_NORMS[@]}")
    else
        echo "FAIL ${fam}_llmc_quantize ($(tail -1 "$D/${fam}_llmc_quantize.err" | cut -c1-200))"; rc=1; PEER=()
    fi
    pyrun ${fam}_hf "$D" "${WRAP[@]}" $CONF/hf_load_kl.py ${fam}_hf "$D/ff" "$D/src/ref_logits.pt" 0.01 \
        --bf16 "$D/src" "${LIN[@]}" "${PEER[@]}"
    # Qwen3.5's published bf16 uploads store experts fused 3-D: the same model in that layout
    # gives the same output, tensor by tensor (only the order inside the file differs)
    if [ $fam = qwen3_5_moe ]; then
        pyrun qwen3_5_moe_fuse "$D" $CONF/fuse_experts.py "$D/src" "$D/fused" > /dev/null
        if "$FF" quantize "$D/fused" "$D/ff-fused" --no-doctor --quiet > "$D/ff-fused.log" 2>&1; then
            pyrun qwen3_5_moe_fused "$D" - "$D/ff" "$D/ff-fused" <<'PYEOF'
import sys, json, torch
from safetensors.torch import load_file
a, b = (load_file(d + "/model.safetensors") for d in sys.argv[1:3])
same = sum(1 for k in a if k in b and torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)))
qa, qb = (json.load(open(d + "/config.json"))["quantization_config"] for d in sys.argv[1:3])
ok = same == len(a) == len(b) and qa == qb
print(f"{'PASS' if ok else 'FAIL'} qwen3_5_moe_fused_experts_equal_per_expert (fused 3-D source: {same}/{len(a)} "
      f"tensors byte-identical to the per-expert source's output, quantization_config equal: {qa == qb})")
sys.exit(0 if ok else 1)
PYEOF
        else echo "FAIL qwen3_5_moe_fused_quantize ($(tail -1 "$D/ff-fused.log"))"; rc=1; fi
    fi
    # MiniMax-M2 ships FP8-block: one pass over that source == quantizing its bf16 copy,
    # and == llm-compressor's oneshot of the bf16 copy
    if [ $fam = minimax_m2 ]; then
        pyrun minimax_fp8 "$D" $CONF/t_minimax_fp8.py "$FF" "$D"
        if [ -d "$D/ff-fp8" ]; then
            pyrun minimax_fp8_llmc_quantize "$D" $CONF/llmc_quantize_moe.py minimax_m2 "$D/ref-bf16" "$D/llmc-ref" > /dev/null
            [ -f "$D/llmc-ref/model.safetensors" ] && pyrun minimax_fp8_llmc "$D" $CONF/llmc_compare.py minimax_fp8_llmc "$D/ff-fp8" "$D/llmc-ref"
        fi
    fi
done
exit $rc

#!/usr/bin/env bash
# The 2026 families (qwen3_5, qwen3_next, minimax_m2, glm4_moe_lite, deepseek_v32, and
# Llama-4 text-only): plan on full-size sparse headers at the published geometry gives
# the exact counts in under 2 s; a recipe that quantizes a router, a shared-expert gate
# or the sparse-attention indexer's wk exits 3 and writes nothing; a tiny synthetic of
# each preset quantizes (MiniMax-M2 from its FP8-block form) and verifies against its
# source; fit counts linear-attention layers as a fixed state a sequence and the
# indexer's key cache a token.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/families-2026; rm -rf "$W"; mkdir -p "$W"

# real NAME PRESET EXPERTS DENSE ROUTERS [synth flags]: sparse headers, plan counts, time
real() {
    local name=$1 preset=$2 experts=$3 dense=$4 routers=$5; shift 5
    $FF_FAST synth --arch "$preset" --size real --sparse "$@" "$W/$name" > /dev/null || { fail "f26_real_${name}_synth"; return; }
    local t0 t1; t0=$(date +%s.%N)
    $FF_FAST plan "$W/$name" --json > "$W/$name.plan.json" 2> "$W/$name.plan.err"; local rc=$?
    t1=$(date +%s.%N)
    local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
    local got; got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["quantized_experts"], j["expected_experts"], j["quantized_dense"], j["routers_ignored"], j["routers_quantized"], j["ok"])' "$W/$name.plan.json" 2>/dev/null)
    if [ $rc -eq 0 ] && [ "$got" = "$experts $experts $dense $routers 0 True" ] && awk -v s="$secs" 'BEGIN{exit !(s < 2.0)}'; then
        pass "f26_real_plan_$name" "$experts expert Linears, $dense dense, $routers routers ignored, ${secs} s"
    else fail "f26_real_plan_$name" "rc=$rc got '$got' want '$experts $experts $dense $routers 0 True' in ${secs} s"; fi
}
# Qwen3.5-397B-A17B: 60 layers, 15 full attention (4 Linears) + 60 shared experts (3);
# experts 60 x 512 x 3; router + shared-expert gate per layer
real qwen3.5-397b-a17b qwen3.5-moe 92160 240 120
real qwen3.6-35b-a3b qwen3.6-moe 30720 160 80
real qwen3.5-27b qwen3.5-dense 0 256 0
real qwen3-next-80b-a3b qwen3-next 73728 192 96
real minimax-m2 minimax-m2 47616 248 62 --source fp8-block
# GLM-4.7-Flash: 47 layers x 5 MLA Linears + 1 dense MLP + 46 shared experts
real glm-4.7-flash glm4.7-flash 8832 376 46
# DeepSeek-V3.2: 61 x (5 MLA + the indexer's wq_b) + 3 dense MLPs + 58 shared experts
real deepseek-v3.2 deepseek-v3.2 44544 549 58
real glm-5 glm5 57600 702 75

# refusals (exit 3, nothing written)
refuse() {
    local name=$1 src=$2; shift 2
    $FF quantize "$W/$src" "$W/out-$name" --no-doctor --quiet "$@" > "$W/$name.out" 2>&1; local rc=$?
    if [ $rc -eq 3 ] && [ ! -e "$W/out-$name" ] && ! ls -d "$W/out-$name".partial-* > /dev/null 2>&1; then
        pass "f26_refuses_$name" "rc=3: $(grep -m1 -o 'plan refused: .*' "$W/$name.out" | cut -c1-110)"
    else fail "f26_refuses_$name" "rc=$rc $(tail -1 "$W/$name.out")"; fi
}
refuse qwen3_5_router qwen3.6-35b-a3b --only 'mlp\.gate$|experts|self_attn|shared_expert\.'
refuse qwen3_5_shared_gate qwen3.6-35b-a3b --only 'shared_expert_gate|experts|self_attn|shared_expert\.'
refuse qwen3_next_missing_experts qwen3-next-80b-a3b --ignore 'layers\.5\.mlp\.experts\.'
refuse minimax_router minimax-m2 --only 'block_sparse_moe\.gate$|self_attn|experts'

# tiny synthetics of every preset: quantize, verify against the source, inspect
for preset in qwen3.5-moe qwen3.6-moe qwen3.5-dense qwen3-next minimax-m2 glm4.7-flash deepseek-v3.2 glm5; do
    src=(); against=$W/tiny-$preset
    if [ $preset = minimax-m2 ]; then
        # verify reads bf16: against the FP8 source's decoded copy (every module kept)
        src=(--source fp8-block); against=$W/dec-$preset
    fi
    $FF_FAST synth --arch "$preset" "${src[@]}" "$W/tiny-$preset" > /dev/null
    if [ $preset = minimax-m2 ]; then   # (a bf16 checkpoint: the all-ignored quantization_config dropped)
        $FF_FAST quantize "$W/tiny-$preset" "$against" --ignore '.*' --allow-partial --no-doctor --quiet > /dev/null 2>&1
        python3 -c 'import json,sys; p=sys.argv[1]+"/config.json"; c=json.load(open(p)); c.pop("quantization_config"); json.dump(c, open(p, "w"))' "$against"
    fi
    if $FF quantize "$W/tiny-$preset" "$W/q-$preset" --no-doctor --quiet > "$W/q-$preset.out" 2>&1 &&
       $FF verify "$W/q-$preset" --against "$against" > "$W/v-$preset.out" 2>&1; then
        pass "f26_tiny_${preset}_quantize_verify" "$(grep -o 'fused_scales .*' "$W/v-$preset.out" | xargs)"
    else fail "f26_tiny_${preset}_quantize_verify" "$(grep -h FAIL "$W/q-$preset.out" "$W/v-$preset.out" | head -2 | xargs) $(tail -1 "$W/q-$preset.out")"; fi
done
# what stays byte for byte: the linear-attention projections, the vision tower, the MTP head
# (its Linears in ignore), the indexer's wk / weights_proj
ignored() {
    local name=$1 preset=$2 pattern=$3 want=$4
    local got; got=$(python3 -c 'import json,re,sys; q=json.load(open(sys.argv[1]))["quantization_config"]; print(sum(1 for m in q["ignore"] if re.search(sys.argv[2], m)))' "$W/q-$preset/config.json" "$pattern" 2>/dev/null)
    [ "$got" = "$want" ] && pass "f26_ignore_$name" "$want modules matching $pattern in ignore" || fail "f26_ignore_$name" "got $got want $want"
}
# tiny qwen3.5-moe: 3 linear-attention layers x 5 projections; 1 vision block x 4 + merger 2;
# MTP: fc + q/k/v/o + shared expert 3 + router + shared-expert gate, and its fused experts' 8 x 3
# Linears by their per-expert names (the ones vLLM's fused-MoE scheme lookup asks for)
ignored qwen3_5_linear_attn qwen3.5-moe 'linear_attn\.' 15
ignored qwen3_5_vision qwen3.5-moe '^model\.visual\.' 6
ignored qwen3_5_mtp qwen3.5-moe '^mtp\.' 34
ignored dsa_indexer deepseek-v3.2 'indexer\.(wk|weights_proj)$' 10

# fit: a Gated-DeltaNet layer's state (conv (kernel-1) x (2 k heads x k dim + v heads x v dim)
# in bf16 + v heads x k dim x v dim in float32, as Qwen3.5's mamba_ssm_dtype asks), 45 of them
want_state=$((45 * (3 * (2 * 16 * 128 + 64 * 128) * 2 + 64 * 128 * 128 * 4)))
got=$($FF fit "$W/qwen3.5-397b-a17b" --json --context 4096 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["linear_attention_layers"], j["state_bytes_per_seq"], j["kv_full_per_token"])')
[ "$got" = "45 $want_state $((15 * 2 * 2 * 256 * 2))" ] && pass "f26_fit_linear_attention_state" "45 layers, $want_state B a sequence, 15 full layers' KV a token" \
    || fail "f26_fit_linear_attention_state" "got $got want 45 $want_state $((15 * 2 * 2 * 256 * 2))"
# DeepSeek-V3.2: the MLA latent (512 + 64) x 2 B plus the indexer's 128 FP8 keys + a 4 B scale, 61 layers
got=$($FF fit "$W/deepseek-v3.2" --json --context 4096 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["kv_full_per_token"])')
[ "$got" = "$((61 * (576 * 2 + 132)))" ] && pass "f26_fit_dsa_indexer_cache" "$got B/token" || fail "f26_fit_dsa_indexer_cache" "got $got want $((61 * (576 * 2 + 132)))"
rm -rf "$W"/qwen3* "$W"/minimax-m2 "$W"/glm-* "$W"/deepseek-*
exit $GOLDEN_RC

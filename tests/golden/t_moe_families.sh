#!/usr/bin/env bash
# MoE families beyond Gemma-4 (qwen3_moe, qwen2_moe, mixtral, glm4_moe,
# llama4): plan on full-size sparse headers at the published geometry gives
# the exact counts in under a second; a recipe that quantizes a router or
# leaves experts out exits 3 and writes nothing; a tiny synthetic of each
# quantizes and verifies against its source; fit and inspect read each
# family's geometry from its own hook.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/moe-families; rm -rf "$W"; mkdir -p "$W"

# real NAME PRESET EXPERTS DENSE ROUTERS [synth flags]: sparse headers, plan counts, time
real() {
    local name=$1 preset=$2 experts=$3 dense=$4 routers=$5; shift 5
    $FF_FAST synth --arch "$preset" --size real --sparse "$@" "$W/$name" > /dev/null || { fail "moe_real_${name}_synth"; return; }
    local t0 t1; t0=$(date +%s.%N)
    $FF_FAST plan "$W/$name" --json > "$W/$name.plan.json" 2> "$W/$name.plan.err"; local rc=$?
    t1=$(date +%s.%N)
    local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
    local got; got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["quantized_experts"], j["expected_experts"], j["quantized_dense"], j["routers_ignored"], j["routers_quantized"], j["ok"])' "$W/$name.plan.json" 2>/dev/null)
    if [ $rc -eq 0 ] && [ "$got" = "$experts $experts $dense $routers 0 True" ] && awk -v s="$secs" 'BEGIN{exit !(s < 1.0)}'; then
        pass "moe_real_plan_$name" "$experts expert Linears, $dense dense, $routers routers ignored, ${secs} s"
    else fail "moe_real_plan_$name" "rc=$rc got '$got' want '$experts $experts $dense $routers 0 True' in ${secs} s"; fi
}
real qwen3-30b-a3b qwen3-moe 18432 192 48
real qwen3-235b-a22b qwen3-moe 36096 376 94 --layers 94 --hidden 4096 --heads 64 --kv-heads 4 \
    --intermediate 12288 --moe-intermediate 1536
real mixtral-8x7b mixtral 768 128 32
real glm-4.5-air glm4-moe 17280 322 45
real llama-4-scout llama4 2304 336 48

# refusals: a router in the quantize set, experts left out (exit 3, nothing written)
refuse() {
    local name=$1 src=$2; shift 2
    $FF quantize "$W/$src" "$W/out-$name" --no-doctor --quiet "$@" > "$W/$name.out" 2>&1; local rc=$?
    if [ $rc -eq 3 ] && [ ! -e "$W/out-$name" ] && ! ls -d "$W/out-$name".partial-* > /dev/null 2>&1; then
        pass "moe_refuses_$name" "rc=3: $(grep -m1 -o 'plan refused: .*' "$W/$name.out" | cut -c1-110)"
    else fail "moe_refuses_$name" "rc=$rc $(tail -1 "$W/$name.out")"; fi
}
refuse qwen3_router qwen3-30b-a3b --only 'mlp\.gate$|experts'
refuse mixtral_router mixtral-8x7b --only 'block_sparse_moe\.gate$|self_attn|experts'
refuse glm_missing_experts glm-4.5-air --ignore 'layers\.7\.mlp\.experts\.'
refuse llama4_router llama-4-scout --only 'router|experts|self_attn|shared_expert'
refuse llama4_missing_experts llama-4-scout --ignore 'layers\.3\.feed_forward\.experts'

# tiny synthetics of every preset: quantize, verify against the source, fit, inspect
for preset in qwen3-moe qwen2-moe mixtral glm4-moe llama4; do
    $FF_FAST synth --arch "$preset" "$W/tiny-$preset" > /dev/null
    if $FF quantize "$W/tiny-$preset" "$W/q-$preset" --no-doctor --quiet > "$W/q-$preset.out" 2>&1 &&
       $FF verify "$W/q-$preset" --against "$W/tiny-$preset" > "$W/v-$preset.out" 2>&1; then
        pass "moe_tiny_${preset}_quantize_verify" "$(grep -o 'fused_scales .*' "$W/v-$preset.out" | xargs)"
    else fail "moe_tiny_${preset}_quantize_verify" "$(grep -h FAIL "$W/q-$preset.out" "$W/v-$preset.out" | head -2 | xargs) $(tail -1 "$W/q-$preset.out")"; fi
    want_experts=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); t=c.get("text_config",c); print(t.get("num_experts") or t.get("num_local_experts") or t.get("n_routed_experts"))' "$W/tiny-$preset/config.json")
    if $FF inspect "$W/q-$preset" --json > "$W/i-$preset.json" 2>&1 &&
       python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); c=j["class"]; sys.exit(0 if c["class"] == "moe" and c["experts"] == int(sys.argv[2]) else 1)' "$W/i-$preset.json" "$want_experts"; then
        pass "moe_inspect_${preset}" "moe, $want_experts experts (family's geometry hook)"
    else fail "moe_inspect_${preset}" "$(head -c 200 "$W/i-$preset.json")"; fi
done

# fit: KV per token from each family's geometry (bf16 KV: 2 tensors x kv_heads x head_dim x 2 bytes a layer)
fitkv() {
    local name=$1 want=$2
    local got; got=$($FF fit "$W/$name" --json --context 4096 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["kv_full_per_token"] + j["kv_sliding_per_token"], j["moe"])')
    [ "$got" = "$want True" ] && pass "moe_fit_kv_$name" "$want B/token" || fail "moe_fit_kv_$name" "got $got want $want"
}
fitkv qwen3-30b-a3b $((48 * 2 * 4 * 128 * 2))
fitkv mixtral-8x7b $((32 * 2 * 8 * 128 * 2))
fitkv glm-4.5-air $((46 * 2 * 8 * 128 * 2))
fitkv llama-4-scout $((48 * 2 * 8 * 128 * 2))
rm -rf "$W"/qwen3-* "$W"/mixtral-* "$W"/glm-* "$W"/llama-4-*
exit $GOLDEN_RC

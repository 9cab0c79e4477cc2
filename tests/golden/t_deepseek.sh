#!/usr/bin/env bash
# DeepSeek-V3 / Kimi-K2 (deepseek_v3) and FP8-block sources (issue 15):
# plan on full-size sparse FP8-block headers of DeepSeek-V3 (671B) and Kimi-K2
# (1T) gives the exact counts in under 2 s, scales belong to their weights
# (no unknown tensors); a recipe that quantizes a router exits 3 and writes
# nothing; a tiny FP8-block synthetic quantizes in one pass and verifies, its
# kept FP8 tensors come out bf16 and its quantization_config is replaced; one
# pass over the FP8 source is byte-identical to two (decode to bf16, then
# quantize that copy); fit reads the MLA latent from the family's geometry.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/deepseek; rm -rf "$W"; mkdir -p "$W"

# real NAME PRESET EXPERTS DENSE ROUTERS
real() {
    local name=$1 preset=$2 experts=$3 dense=$4 routers=$5; shift 5
    $FF_FAST synth --arch "$preset" --size real --sparse --source fp8-block "$W/$name" > /dev/null || { fail "deepseek_real_${name}_synth"; return; }
    # best of two runs: the machine is shared, and the first run also pages the headers in
    local t0 t1 rc secs=99 s
    for _ in 1 2; do
        t0=$(date +%s.%N)
        $FF_FAST plan "$W/$name" --json > "$W/$name.plan.json" 2> "$W/$name.plan.err"; rc=$?
        t1=$(date +%s.%N)
        s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
        secs=$(awk -v a="$s" -v b="$secs" 'BEGIN{print (a < b) ? a : b}')
    done
    local got; got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["quantized_experts"], j["expected_experts"], j["quantized_dense"], j["routers_ignored"], j["routers_quantized"], j["ok"], sum("not a tensor" in n for n in j["notes"]))' "$W/$name.plan.json" 2>/dev/null)
    if [ $rc -eq 0 ] && [ "$got" = "$experts $experts $dense $routers 0 True 0" ] && awk -v s="$secs" 'BEGIN{exit !(s < 2.0)}'; then
        pass "deepseek_real_plan_$name" "$experts expert Linears, $dense dense, $routers routers ignored, FP8-block headers, ${secs} s"
    else fail "deepseek_real_plan_$name" "rc=$rc got '$got' want '$experts $experts $dense $routers 0 True 0' in ${secs} s"; fi
}
real deepseek-v3 deepseek-v3 44544 488 58
real kimi-k2 kimi-k2 69120 488 60

# refusal: a router in the quantize set (exit 3, nothing written)
$FF quantize "$W/deepseek-v3" "$W/out-router" --no-doctor --quiet --only 'mlp\.gate$|experts|self_attn' > "$W/router.out" 2>&1; rc=$?
if [ $rc -eq 3 ] && [ ! -e "$W/out-router" ] && ! ls -d "$W/out-router".partial-* > /dev/null 2>&1; then
    pass "deepseek_refuses_router" "rc=3: $(grep -m1 -o 'plan refused: .*' "$W/router.out" | cut -c1-100)"
else fail "deepseek_refuses_router" "rc=$rc $(tail -1 "$W/router.out")"; fi

# fit: MLA caches kv_lora_rank + qk_rope_head_dim per token and layer (bf16)
fitkv() {
    local name=$1 want=$2
    local got; got=$($FF fit "$W/$name" --json --context 4096 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["kv_full_per_token"] + j["kv_sliding_per_token"], j["moe"])')
    [ "$got" = "$want True" ] && pass "deepseek_fit_kv_$name" "$want B/token (MLA latent)" || fail "deepseek_fit_kv_$name" "got $got want $want"
}
fitkv deepseek-v3 $((61 * (512 + 64) * 2))
fitkv kimi-k2 $((61 * (512 + 64) * 2))
rm -rf "$W/deepseek-v3" "$W/kimi-k2"

# tiny FP8-block sources: quantize in one pass, verify, inspect
for preset in deepseek-v3 kimi-k2; do
    $FF_FAST synth --arch "$preset" --source fp8-block "$W/fp8-$preset" > /dev/null
    if $FF quantize "$W/fp8-$preset" "$W/q-$preset" --quiet > "$W/q-$preset.out" 2>&1 &&
       $FF verify "$W/q-$preset" > "$W/v-$preset.out" 2>&1; then
        pass "deepseek_tiny_fp8_${preset}_quantize_verify" "$(grep -o 'fused_scales .*' "$W/v-$preset.out" | xargs)"
    else fail "deepseek_tiny_fp8_${preset}_quantize_verify" "$(grep -h FAIL "$W/q-$preset.out" "$W/v-$preset.out" | head -2 | xargs) $(tail -1 "$W/q-$preset.out")"; fi
    want_experts=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["n_routed_experts"])' "$W/fp8-$preset/config.json")
    if $FF inspect "$W/q-$preset" --json > "$W/i-$preset.json" 2>&1 &&
       python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); c=j["class"]; sys.exit(0 if c["class"] == "moe" and c["experts"] == int(sys.argv[2]) else 1)' "$W/i-$preset.json" "$want_experts"; then
        pass "deepseek_inspect_${preset}" "moe, $want_experts experts"
    else fail "deepseek_inspect_${preset}" "$(head -c 200 "$W/i-$preset.json")"; fi
done

# the output of an FP8 source: no F8_E4M3 weight or weight_scale_inv left, kept
# FP8 Linears (the MTP layer) bf16, q_a/kv_a sharing one global scale, the
# quantization_config NVFP4A16's
if python3 - "$W/q-deepseek-v3" > "$W/shape.out" 2>&1 <<'PY'
import glob, json, struct, sys
d = sys.argv[1]
hdr = {}
for f in sorted(glob.glob(d + "/*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(n))
        for k, v in h.items():
            if k != "__metadata__":
                fh.seek(8 + n + v["data_offsets"][0])
                hdr[k] = (v["dtype"], fh.read(v["data_offsets"][1] - v["data_offsets"][0]))
assert not [k for k in hdr if k.endswith("weight_scale_inv")], "a weight_scale_inv was written"
assert not [k for k, v in hdr.items() if v[0] == "F8_E4M3" and not k.endswith(".weight_scale")], "an F8_E4M3 tensor was written"
c = json.load(open(d + "/config.json"))
q = c["quantization_config"]
assert q["quant_method"] == "compressed-tensors" and q["format"] == "nvfp4-pack-quantized", q
L = c["num_hidden_layers"]
assert hdr[f"model.layers.{L}.self_attn.q_a_proj.weight"][0] == "BF16"
assert hdr[f"model.layers.{L}.eh_proj.weight"][0] == "BF16"
assert f"model.layers.{L}.self_attn.q_a_proj" in q["ignore"] and "model.layers.3.mlp.gate" in q["ignore"]
for l in range(L):
    a = hdr[f"model.layers.{l}.self_attn.q_a_proj.weight_global_scale"][1]
    b = hdr[f"model.layers.{l}.self_attn.kv_a_proj_with_mqa.weight_global_scale"][1]
    assert a == b, f"layer {l}: q_a_proj and kv_a_proj_with_mqa global scales differ"
print(len(hdr), "tensors;", len(q["ignore"]), "ignored")
PY
then pass "deepseek_fp8_output_shape" "$(cat "$W/shape.out")"
else fail "deepseek_fp8_output_shape" "$(tail -2 "$W/shape.out" | xargs)"; fi

# verify --against an FP8 source is refused by name (usage), not misread
$FF verify "$W/q-deepseek-v3" --against "$W/fp8-deepseek-v3" > "$W/vagainst.out" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q "FP8-block source is not supported" "$W/vagainst.out"; then
    pass "deepseek_verify_against_fp8_refused" "rc=2"
else fail "deepseek_verify_against_fp8_refused" "rc=$rc $(tail -1 "$W/vagainst.out")"; fi

# one pass == two passes: decode the FP8 source to a bf16 copy (every module
# kept), drop its quantization_config, quantize that copy: byte-identical
for preset in deepseek-v3 kimi-k2; do
    $FF quantize "$W/fp8-$preset" "$W/dec-$preset" --no-doctor --quiet --ignore '.*' --allow-partial > "$W/dec-$preset.out" 2>&1
    python3 -c 'import json,sys; p=sys.argv[1]+"/config.json"; c=json.load(open(p)); del c["quantization_config"]; json.dump(c, open(p,"w"), indent=2)' "$W/dec-$preset"
    $FF quantize "$W/dec-$preset" "$W/q2-$preset" --no-doctor --quiet > "$W/q2-$preset.out" 2>&1
    if cmp -s "$W/q-$preset/model.safetensors" "$W/q2-$preset/model.safetensors" 2>/dev/null ||
       (cd "$W/q-$preset" && for f in *.safetensors; do cmp -s "$f" "../q2-$preset/$f" || exit 1; done) &&
       python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["quantization_config"]; b=json.load(open(sys.argv[2]))["quantization_config"]; sys.exit(0 if a == b else 1)' "$W/q-$preset/config.json" "$W/q2-$preset/config.json"; then
        pass "deepseek_fp8_one_pass_equals_two_${preset}" "$(ls "$W/q-$preset"/*.safetensors | wc -l) shard(s) byte-identical, quantization_config equal"
    else fail "deepseek_fp8_one_pass_equals_two_${preset}" "$(tail -1 "$W/dec-$preset.out") $(tail -1 "$W/q2-$preset.out")"; fi
done

# a bf16 deepseek-v3 source takes the same family
$FF_FAST synth --arch deepseek-v3 "$W/bf16" > /dev/null
if $FF quantize "$W/bf16" "$W/q-bf16" --quiet > "$W/q-bf16.out" 2>&1 && $FF verify "$W/q-bf16" --against "$W/bf16" > "$W/v-bf16.out" 2>&1; then
    pass "deepseek_tiny_bf16_quantize_verify" "$(grep -o 'fused_scales .*' "$W/v-bf16.out" | xargs)"
else fail "deepseek_tiny_bf16_quantize_verify" "$(grep -h FAIL "$W/q-bf16.out" "$W/v-bf16.out" | head -2 | xargs) $(tail -1 "$W/q-bf16.out")"; fi

# an FP8 quantization_config fp4forge does not decode is refused by name
cp -r "$W/fp8-deepseek-v3" "$W/fp8-pertensor"
python3 -c 'import json,sys; p=sys.argv[1]+"/config.json"; c=json.load(open(p)); c["quantization_config"]["weight_block_size"]=None; json.dump(c, open(p,"w"))' "$W/fp8-pertensor"
$FF plan "$W/fp8-pertensor" > "$W/pertensor.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "FP8 quantization_config fp4forge does not decode" "$W/pertensor.out"; then
    pass "deepseek_refuses_unknown_fp8" "rc=1: $(grep -o 'does not decode: .*' "$W/pertensor.out" | cut -c1-80)"
else fail "deepseek_refuses_unknown_fp8" "rc=$rc $(tail -1 "$W/pertensor.out")"; fi
rm -rf "$W"
exit $GOLDEN_RC

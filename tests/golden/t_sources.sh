#!/usr/bin/env bash
# Vendor-quantized sources without the peers (tests/conformance/t_ct_sources.sh proves
# the decoders against compressed-tensors itself): Kimi-K2.5's INT4 layout and MXFP4
# experts made by synth, decoded as an independent plain-python decoder does, quantized
# and verified; MXFP4's exact route dequantizes to the source's values bit for bit and
# --mxfp4-route reference re-quantizes; the output keeps no source quantization_config;
# the Kimi-K2.5 real-geometry plan from INT4 headers in under 3 s; hostile sources refused
# with one line naming the tensor or key, nothing written.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/sources; rm -rf "$W"; mkdir -p "$W"
PYS=$(dirname "$0")/sources_py.py

# Kimi-K2.5 INT4: decode == the plain decoder; quantize + verify; config
$FF_FAST synth --arch kimi-k2.5 --source int4 "$W/k25" > /dev/null || fail "sources_k25_synth"
$FF quantize "$W/k25" "$W/k25-dec" --ignore '.*' --allow-partial --quiet > "$W/k25-dec.out" 2>&1 || fail "sources_k25_decode_run" "$(tail -1 "$W/k25-dec.out")"
mods="language_model.model.layers.1.mlp.experts.0.gate_proj language_model.model.layers.3.mlp.experts.11.down_proj"
got=$(python3 "$PYS" decode "$W/k25" "$W/k25-dec" $mods 2>&1)
[ "$got" = equal ] && pass "sources_int4_decode_equals_plain_decoder" "2 experts, bf16(q * scale)" || fail "sources_int4_decode_equals_plain_decoder" "$got"
if $FF quantize "$W/k25" "$W/k25-q" --quiet > "$W/k25-q.out" 2>&1 && $FF verify "$W/k25-q" > "$W/k25-v.out" 2>&1; then
    pass "sources_k25_quantize_verify" "$(grep -o 'quantized .*' "$W/k25-q.out" | head -1)"
else fail "sources_k25_quantize_verify" "$(tail -2 "$W/k25-q.out" "$W/k25-v.out" | tr '\n' ' ')"; fi
got=$(python3 - "$W/k25-q/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); q = c["quantization_config"]; ig = q["ignore"]
print("quantization_config" in c["text_config"], q["format"], "language_model.lm_head" in ig,
      any(i.startswith("vision_tower.") for i in ig), any(i.startswith("mm_projector.") for i in ig),
      "language_model.model.layers.1.mlp.gate" in ig)
PY
)
[ "$got" = "False nvfp4-pack-quantized True True True True" ] && pass "sources_k25_config" "INT4 text_config.quantization_config gone; lm_head, vision, projector, routers in ignore" || fail "sources_k25_config" "$got"

# MXFP4: exact route by default, reference route on request
$FF_FAST synth --arch deepseek-v3 --source mxfp4 "$W/mx" > /dev/null || fail "sources_mx_synth"
$FF quantize "$W/mx" "$W/mx-dec" --ignore '.*' --allow-partial --quiet > /dev/null 2>&1
got=$(python3 "$PYS" decode "$W/mx" "$W/mx-dec" model.layers.2.mlp.experts.0.up_proj model.layers.3.mlp.experts.7.down_proj 2>&1)
[ "$got" = equal ] && pass "sources_mxfp4_decode_equals_plain_decoder" "2 experts, code * 2^(e - 127)" || fail "sources_mxfp4_decode_equals_plain_decoder" "$got"
$FF quantize "$W/mx" "$W/mx-q" --quiet > "$W/mx-q.out" 2>&1 && $FF dequantize "$W/mx-q" "$W/mx-q-dq" > /dev/null 2>&1
exact=$(grep -o 'mxfp4 .*' "$W/mx-q.out")
names=$(python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); h=json.loads(b[8:8+struct.unpack("<Q",b[:8])[0]]); print(" ".join(k[:-14]+".weight" for k in h if k.endswith(".weight_packed") and ".layers.4." not in k))' "$W/mx/model.safetensors")
got=$(python3 "$PYS" same "$W/mx-q-dq" "$W/mx-dec" $names 2>&1)
if [ "$got" = equal ] && grep -q '48 weights carried exactly.* 0 re-quantized' <<< "$exact"; then
    pass "sources_mxfp4_exact_route" "$(wc -w <<< "$names") quantized experts dequantize to the source's values bit for bit; $exact"
else fail "sources_mxfp4_exact_route" "$got; $exact"; fi
$FF verify "$W/mx-q" > "$W/mx-v.out" 2>&1 && pass "sources_mxfp4_exact_verifies" || fail "sources_mxfp4_exact_verifies" "$(tail -2 "$W/mx-v.out")"
$FF quantize "$W/mx" "$W/mx-r" --quiet --mxfp4-route reference > "$W/mx-r.out" 2>&1
grep -q '0 weights carried exactly.* 48 re-quantized' "$W/mx-r.out" && pass "sources_mxfp4_reference_route" "$(grep -o 'mxfp4 .*' "$W/mx-r.out" | cut -c1-90)" || fail "sources_mxfp4_reference_route" "$(tail -2 "$W/mx-r.out")"
expect_rc sources_mxfp4_route_unknown 2 $FF quantize "$W/mx" "$W/mx-x" --mxfp4-route nearest

# refusals that name the format
expect_rc sources_verify_against_int4_refused 2 $FF verify "$W/k25-q" --against "$W/k25"
grep -q "compressed-tensors INT4 pack-quantized, group 32" "$WORK/sources_verify_against_int4_refused.out" && pass "sources_verify_against_int4_names_format" || fail "sources_verify_against_int4_names_format" "$(tail -1 "$WORK/sources_verify_against_int4_refused.out")"
$FF dequantize "$W/k25" "$W/k25-dq" > "$W/dq-int4.out" 2>&1
grep -q 'INT4 pack-quantized, group 32 checkpoint (fp4forge quantize reads it as it is)' "$W/dq-int4.out" && pass "sources_dequantize_says_what_it_is" || fail "sources_dequantize_says_what_it_is" "$(tail -1 "$W/dq-int4.out")"

# hostile sources: one line naming the tensor or key, exit 1, nothing at OUT
hostile() {   # NAME GOOD KIND WANT
    local mod; mod=$(python3 "$PYS" bad "$2" "$W/bad-$1" "$3") || { fail "sources_hostile_$1" "could not make it"; return; }
    $FF quantize "$W/bad-$1" "$W/bad-$1-out" --quiet > "$W/bad-$1.out" 2>&1; local rc=$?
    local want=${4:-$mod}
    if [ $rc -eq 1 ] && [ ! -e "$W/bad-$1-out" ] && ! ls -d "$W/bad-$1-out".partial-* > /dev/null 2>&1 && grep -q -- "$want" "$W/bad-$1.out"; then
        pass "sources_hostile_$1" "$(grep -o 'tensor .*\|config.json: .*' "$W/bad-$1.out" | head -1 | cut -c1-110)"
    else fail "sources_hostile_$1" "rc=$rc, wanted 1 naming $want: $(tail -1 "$W/bad-$1.out")"; fi
}
hostile int4_nan_scale "$W/k25" nan_scale
hostile int4_weight_shape_lies "$W/k25" shape_lies
hostile int4_missing_scale "$W/k25" no_scale
hostile int4_bits_8 "$W/k25" bits_8 num_bits
hostile mxfp4_e8m0_255 "$W/mx" e8m0_255
# FP8-block: the amax pass reads codes only (or only the top-scale blocks); a NaN byte or a
# non-finite block is still named by element, one away from the top-scale blocks by the quantizing pass
$FF_FAST synth --arch kimi-k2 --source fp8-block --layers 2 --experts 2 "$W/fp8" > /dev/null || fail "sources_fp8_synth"
hostile fp8_nan_byte "$W/fp8" fp8_nan_byte "weight: element 77 is NaN or Inf"
hostile fp8_inf_scale "$W/fp8" fp8_inf_scale "weight: element 0 is NaN or Inf"
hostile fp8_nan_low_block "$W/fp8" fp8_nan_low_block
# Units of 2^18 elements and more take the next unit's amax from its scales in their own pass
# (qz_write_unit's ahead): the low-block NaN of a later unit is still named, by element
$FF_FAST synth --arch kimi-k2 --source fp8-block --layers 2 --experts 2 --hidden 512 --moe-intermediate 1024 \
    --intermediate 1024 "$W/fp8m" > /dev/null || fail "sources_fp8m_synth"
hostile fp8_nan_low_block_taken_ahead "$W/fp8m" fp8_nan_low_block:model.layers.1.mlp.experts.1.down_proj
# the same bytes on 1 thread (no queue; amax ahead still task 0) and 3 (codes and kept
# tensors in the writers' turns, turns that go on while the pool has tasks)
$FF_FAST synth --arch kimi-k2 --source mxfp4 --layers 2 --experts 2 --hidden 512 --moe-intermediate 1024 \
    --intermediate 1024 "$W/mxm" > /dev/null || fail "sources_mxm_synth"
for src in fp8m mxm; do
    for t in 1 3; do $FF quantize "$W/$src" "$W/$src-t$t" --quiet --threads $t > /dev/null 2>&1; done
    if cmp -s "$W/$src-t1/model.safetensors" "$W/$src-t3/model.safetensors"; then
        pass "sources_${src}_threads_same_bytes" "1 and 3 threads"
    else fail "sources_${src}_threads_same_bytes" "1 and 3 threads differ"; fi
done

# Kimi-K2.5 at real geometry: plan from INT4 sparse headers (best of two)
$FF_FAST synth --arch kimi-k2.5 --size real --sparse --source int4 "$W/k25-real" > /dev/null || fail "sources_k25_real_synth"
secs=99
for _ in 1 2; do
    t0=$(date +%s.%N); $FF_FAST plan "$W/k25-real" --json > "$W/k25-real.json" 2> "$W/k25-real.err"; rc=$?; t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" -v s="$secs" 'BEGIN{d=b-a; printf "%.2f", d < s ? d : s}')
done
got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["quantized_experts"], j["expected_experts"], j["quantized_dense"], j["routers_ignored"], j["ok"])' "$W/k25-real.json" 2>/dev/null)
if [ "$rc" -eq 0 ] && [ "$got" = "69120 69120 488 60 True" ] && awk -v s="$secs" 'BEGIN{exit !(s < 3.0)}'; then
    pass "sources_k25_real_plan" "61 layers x 384 experts: 69120 expert Linears from INT4 headers, 488 dense, 60 routers ignored, ${secs} s"
else fail "sources_k25_real_plan" "rc=$rc got '$got' in ${secs} s"; fi
rm -rf "$W/k25-real"

# gptoss_real_plan ARCH NAME WHAT: gpt-oss-120b's plan (36 layers x 128 experts: 13824 expert
# Linears, 144 dense, 36 routers ignored) from ARCH's sparse real-geometry headers in under 3 s
gptoss_real_plan() {
    local d="$W/$1-real" rc secs got t0 t1
    $FF_FAST synth --arch "$1" --size real --sparse "$d" > /dev/null || fail "${2}_real_synth"
    t0=$(date +%s.%N); $FF_FAST plan "$d" --json > "$d.json" 2>&1; rc=$?; t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
    got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["quantized_experts"], j["expected_experts"], j["quantized_dense"], j["routers_ignored"], j["ok"])' "$d.json" 2>/dev/null)
    if [ "$rc" -eq 0 ] && [ "$got" = "13824 13824 144 36 True" ] && awk -v s="$secs" 'BEGIN{exit !(s < 3.0)}'; then
        pass "${2}_120b_real_plan" "36 layers x 128 experts: 13824 expert Linears from $3, 144 dense, 36 routers ignored, ${secs} s"
    else fail "${2}_120b_real_plan" "rc=$rc got '$got' in ${secs} s"; fi
    rm -rf "$d"
}
# gpt-oss: its own MXFP4 layout read per expert, carried exactly; the family's note on
# vLLM; gpt-oss-120b's real-geometry plan (36 layers x 128 experts x 3)
$FF_FAST synth --arch gpt-oss-20b "$W/oss" > /dev/null || fail "sources_gptoss_synth"
if $FF quantize "$W/oss" "$W/oss-q" > "$W/oss-q.out" 2>&1 && $FF verify "$W/oss-q" > "$W/oss-v.out" 2>&1 &&
    grep -q '24 weights carried exactly.* 0 re-quantized' "$W/oss-q.out" && grep -q 'vLLM 0.32 cannot load' "$W/oss-q.out"; then
    pass "sources_gptoss_quantize_verify" "$(grep -o 'mxfp4 .*' "$W/oss-q.out" | cut -c1-70)"
else fail "sources_gptoss_quantize_verify" "$(tail -2 "$W/oss-q.out" "$W/oss-v.out" | tr '\n' ' ')"; fi
got=$(python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); h=json.loads(b[8:8+struct.unpack("<Q",b[:8])[0]]); print(sorted(k for k in h if ".layers.1.mlp.experts.3." in k))' "$W/oss-q/model.safetensors")
want="['model.layers.1.mlp.experts.3.down_proj.bias', 'model.layers.1.mlp.experts.3.down_proj.weight_global_scale', 'model.layers.1.mlp.experts.3.down_proj.weight_packed', 'model.layers.1.mlp.experts.3.down_proj.weight_scale', 'model.layers.1.mlp.experts.3.gate_proj.bias', 'model.layers.1.mlp.experts.3.gate_proj.weight_global_scale', 'model.layers.1.mlp.experts.3.gate_proj.weight_packed', 'model.layers.1.mlp.experts.3.gate_proj.weight_scale', 'model.layers.1.mlp.experts.3.up_proj.bias', 'model.layers.1.mlp.experts.3.up_proj.weight_global_scale', 'model.layers.1.mlp.experts.3.up_proj.weight_packed', 'model.layers.1.mlp.experts.3.up_proj.weight_scale']"
[ "$got" = "$want" ] && pass "sources_gptoss_llmc_names" "experts.N.{gate,up,down}_proj with bias, as llm-compressor linearizes gpt-oss" || fail "sources_gptoss_llmc_names" "$got"
# transformers' bf16 gpt-oss (its MXFP4 dequantizer's save: experts fused [E, H, 2I] / [E, I, H],
# used as x @ W, gate/up interleaved by column) split per expert: the same bytes as the
# reference route over the MXFP4 source; a down_proj stored untransposed refused by name
PY=tests/golden/sources_py.py
if $FF_FAST quantize "$W/oss" "$W/oss-dec" --ignore '.*' --allow-partial > /dev/null 2>&1 &&
    python3 $PY fuse-gptoss "$W/oss-dec" "$W/oss-bf16" > /dev/null &&
    $FF quantize "$W/oss-bf16" "$W/oss-bf16-q" > "$W/oss-bf16-q.out" 2>&1 &&
    $FF_FAST quantize "$W/oss" "$W/oss-ref-q" --mxfp4-route reference > /dev/null 2>&1; then
    got=$(python3 $PY same-all "$W/oss-bf16-q" "$W/oss-ref-q")
    case $got in equal*) pass "sources_gptoss_bf16_layout" "quantize of the fused bf16 copy == --mxfp4-route reference on the MXFP4 source: $got tensors";;
        *) fail "sources_gptoss_bf16_layout" "$got";; esac
else fail "sources_gptoss_bf16_layout" "$(tail -2 "$W/oss-bf16-q.out" 2>/dev/null | tr '\n' ' ')"; fi
python3 $PY fuse-gptoss "$W/oss-dec" "$W/oss-lie" down_untransposed > /dev/null
$FF quantize "$W/oss-lie" "$W/oss-lie-q" > "$W/oss-lie.out" 2>&1; rc=$?
if [ "$rc" -eq 1 ] && [ ! -e "$W/oss-lie-q" ] && grep -q 'experts.down_proj: BF16 \[4, 128, 96\] disagrees with config.json.*expected \[4, 96, 128\]' "$W/oss-lie.out"; then
    pass "sources_gptoss_bf16_shape_lies" "$(head -c 160 "$W/oss-lie.out")"
else fail "sources_gptoss_bf16_shape_lies" "rc=$rc $(tr '\n' ' ' < "$W/oss-lie.out")"; fi
$FF verify "$W/oss-bf16-q" --against "$W/oss-bf16" > "$W/oss-bf16-v.out" 2>&1; rc=$?
if [ "$rc" -eq 2 ] && grep -q 'against a gpt-oss bf16 fused experts source is not supported' "$W/oss-bf16-v.out"; then
    pass "sources_gptoss_bf16_verify_against" "refused, pointing at the decoded copy"
else fail "sources_gptoss_bf16_verify_against" "rc=$rc $(tr '\n' ' ' < "$W/oss-bf16-v.out")"; fi
# synth's own bf16 preset (the same layout): quantize + verify, and gpt-oss-120b's plan from it
$FF_FAST synth --arch gpt-oss-20b-bf16 "$W/oss16" > /dev/null 2>&1
if $FF quantize "$W/oss16" "$W/oss16-q" > "$W/oss16-q.out" 2>&1 && $FF verify "$W/oss16-q" > "$W/oss16-v.out" 2>&1 &&
    grep -q '24 expert Linears' "$W/oss16-q.out"; then
    pass "sources_gptoss_bf16_synth_quantize_verify" "$(grep -o 'quantized .*' "$W/oss16-q.out")"
else fail "sources_gptoss_bf16_synth_quantize_verify" "$(tail -2 "$W/oss16-q.out" "$W/oss16-v.out" | tr '\n' ' ')"; fi
gptoss_real_plan gpt-oss-120b-bf16 sources_gptoss_bf16 "the fused bf16 headers (218 GiB)"
rm -rf "$W/oss-dec" "$W/oss-bf16" "$W/oss-bf16-q" "$W/oss-ref-q" "$W/oss-lie" "$W/oss16" "$W/oss16-q"
gptoss_real_plan gpt-oss-120b sources_gptoss "MXFP4 headers"
exit $GOLDEN_RC

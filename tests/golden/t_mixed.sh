#!/usr/bin/env bash
# quantize --fp8 REGEX (issue 40, item 1): the refusals, each one line on stderr, exit 2,
# before any work (nothing written: no OUT, no OUT.partial-*): a fused unit split by --fp8
# or --ignore (q/k/v, gate/up, MLA's q_a + kv_a), --fp8 on MoE experts (per-expert and
# fused 3-D), --fp8 with an MSE observer; and what it writes: plan counts (text, JSON), the
# two config groups, F8_E4M3 weights with a bf16 [out, 1] scale, the card's scheme table,
# an --fp8 that matches nothing writing exactly the all-NVFP4A16 output.
# Byte equality with llm-compressor and vLLM's loader: tests/conformance/t_mixed.sh.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/mixed; rm -rf "$W"; mkdir -p "$W"
$FF_FAST synth "$W/dense" > /dev/null 2>&1 || fail mixed_synth_dense
$FF_FAST synth --arch qwen3-moe "$W/qmoe" > /dev/null 2>&1 || fail mixed_synth_qwen3_moe
$FF_FAST synth --arch gemma4-moe "$W/gmoe" > /dev/null 2>&1 || fail mixed_synth_gemma4_moe
$FF_FAST synth --arch deepseek-v3 "$W/dsv3" > /dev/null 2>&1 || fail mixed_synth_deepseek_v3

# refuse NAME WANT_TEXT SRC ARGS...: quantize refuses with exit 2, one stderr line holding
# WANT_TEXT, and nothing written
refuse() {
    local name=$1 want=$2 src=$3; shift 3
    local out="$W/out-$name"
    $FF quantize "$src" "$out" --no-doctor --quiet "$@" > "$W/$name.stdout" 2> "$W/$name.err"
    local rc=$? lines; lines=$(wc -l < "$W/$name.err")
    local left; left=$(ls -d "$out" "$out".partial-* 2>/dev/null | wc -l)
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$W/$name.err" && [ "$left" -eq 0 ]; then
        pass "$name" "exit 2, nothing written: $(cut -c1-150 "$W/$name.err")"
    else
        fail "$name" "rc=$rc, $lines stderr lines, $left outputs left: $(head -2 "$W/$name.err" | tr '\n' ' ' | cut -c1-200)"
    fi
}
refuse mixed_refuses_split_qkv "split the fused unit model.language_model.layers.0.self_attn (qkv): q_proj FP8, k_proj NVFP4" \
    "$W/dense" --fp8 'self_attn\.q_proj'
refuse mixed_refuses_split_gate_up_by_ignore "(gate_up): gate_proj NVFP4, up_proj kept" \
    "$W/dense" --ignore 'layers\.2\.mlp\.up_proj' --allow-partial
refuse mixed_refuses_split_gate_up_fp8_vs_kept "(gate_up): gate_proj FP8, up_proj kept" \
    "$W/dense" --fp8 'mlp\.gate_proj' --ignore 'mlp\.up_proj' --allow-partial
refuse mixed_refuses_split_mla_qkv_a "(qkv_a): q_a_proj FP8, kv_a_proj_with_mqa NVFP4" "$W/dsv3" --fp8 'q_a_proj'
refuse mixed_refuses_fp8_expert "--fp8 mlp matches the MoE expert Linear model.layers.0.mlp.experts.0.gate_proj: vLLM serves compressed-tensors experts as NVFP4 or unquantized only" \
    "$W/qmoe" --fp8 'mlp'
refuse mixed_refuses_fp8_fused_experts "matches the MoE expert Linear model.language_model.layers.0.experts.gate_up_proj" \
    "$W/gmoe" --fp8 'experts'
refuse mixed_refuses_fp8_with_mse "--fp8 takes the minmax observer only, not --observer mse" \
    "$W/dense" --fp8 self_attn --observer mse
# plan refuses the same way (exit 2, the same line)
$FF plan "$W/dense" --fp8 'self_attn\.q_proj' > /dev/null 2> "$W/plan-split.err"; rc=$?
if [ $rc -eq 2 ] && grep -q "split the fused unit" "$W/plan-split.err"; then pass mixed_plan_refuses_split "exit 2"
else fail mixed_plan_refuses_split "rc=$rc $(head -1 "$W/plan-split.err")"; fi

# What --fp8 self_attn writes on the synthetic Gemma-4 dense checkpoint.
$FF plan "$W/dense" --fp8 self_attn --json > "$W/plan.json" 2> "$W/plan.err" || fail mixed_plan_json "$(head -1 "$W/plan.err")"
$FF plan "$W/dense" --fp8 self_attn > "$W/plan.txt" 2>&1
got=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); a=[f for f in j["families"] if f["family"]=="attention"][0]
print(j["quantized_fp8"], a["quantized"], a["fp8"], j["quantized_dense"], j["ok"])' "$W/plan.json" 2>&1)
want=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); a=[f for f in j["families"] if f["family"]=="attention"][0]
print(a["quantized"], a["quantized"], a["quantized"], j["expected_dense"], True)' "$W/plan.json" 2>&1)
if [ "$got" = "$want" ] && grep -q "FP8 weight-only (--fp8)   [0-9]* Linears (attention [0-9]*)" "$W/plan.txt"; then
    pass mixed_plan_counts "quantized_fp8 attention quantized attention fp8 dense ok: $got; $(grep 'FP8 weight-only' "$W/plan.txt" | sed 's/^ *//')"
else fail mixed_plan_counts "got '$got' want '$want'"; fi
if $FF quantize "$W/dense" "$W/q" --fp8 self_attn --no-doctor --quiet > "$W/q.log" 2>&1; then
    got=$(python3 - "$W/q" <<'PY' 2>&1
import json, struct, sys, glob
d = sys.argv[1]
q = json.load(open(f"{d}/config.json"))["quantization_config"]
g = q["config_groups"]
hdr = {}
for f in glob.glob(f"{d}/*.safetensors"):
    b = open(f, "rb").read(8); n = struct.unpack("<Q", b)[0]
    hdr.update(json.loads(open(f, "rb").read(8 + n)[8:]))
t0 = [t for t in g["group_0"]["targets"] if not t.startswith("re:")][0]
w, s = hdr[t0 + ".weight"], hdr[t0 + ".weight_scale"]
ok = (q["format"] == "mixed-precision" and g["group_0"]["format"] == "naive-quantized"
      and g["group_1"]["format"] == "nvfp4-pack-quantized" and g["group_1"]["targets"] == ["Linear"]
      and g["group_0"]["weights"]["strategy"] == "channel" and g["group_0"]["input_activations"] is None
      and w["dtype"] == "F8_E4M3" and s["dtype"] == "BF16" and s["shape"] == [w["shape"][0], 1]
      and t0 + ".weight_zero_point" not in hdr and t0 + ".weight_packed" not in hdr)
print("ok" if ok else "bad", t0, w["dtype"], w["shape"], s["dtype"], s["shape"], len(g["group_0"]["targets"]),
      [t for t in g["group_0"]["targets"] if t.startswith("re:")][:1])
PY
)
    case "$got" in ok*) pass mixed_quantize_groups_and_tensors "$got";; *) fail mixed_quantize_groups_and_tensors "$got";; esac
    if grep -q '^| attention | 0 | [1-9][0-9]* | 0 |$' "$W/q/README.md"; then pass mixed_card_schemes "$(grep '^| attention |' "$W/q/README.md" | tail -1)"
    else fail mixed_card_schemes "no attention row with FP8 in the card's scheme table"; fi
else fail mixed_quantize_groups_and_tensors "$(tail -1 "$W/q.log")"; fi

# an --fp8 that matches nothing: the plan notes it and the output is the plain one, byte for byte
$FF_FAST quantize "$W/dense" "$W/plain" --no-doctor --quiet > /dev/null 2>&1
$FF_FAST quantize "$W/dense" "$W/nomatch" --fp8 'no_such_module' --no-doctor --quiet > "$W/nomatch.log" 2>&1
bad=$(bash "$(dirname "$0")/../same_output.sh" "$W/plain" "$W/nomatch")
if [ -z "$bad" ] && grep -q "matched no Linear" "$W/nomatch.log"; then pass mixed_fp8_nomatch_is_plain "output identical, noted"
else fail mixed_fp8_nomatch_is_plain "differ:$bad; $(grep -c 'matched no' "$W/nomatch.log") notes"; fi
exit $GOLDEN_RC

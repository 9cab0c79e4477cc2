#!/usr/bin/env bash
# quantize --fp8 REGEX (issue 40, item 1): the refusals, each one line on stderr, exit 2,
# before any work (nothing written: no OUT, no OUT.partial-*): a fused unit split by --fp8
# or --ignore (q/k/v, gate/up, MLA's q_a + kv_a), --fp8 on MoE experts (per-expert and
# fused 3-D), --fp8 with an MSE observer; and what it writes: plan counts (text, JSON), the
# two config groups, F8_E4M3 weights with a bf16 [out, 1] scale, the card's scheme table,
# an --fp8 that matches nothing writing exactly the all-NVFP4A16 output.
# The checking commands on that output: verify (alone and --against the source) passes and
# fails (exit 6, naming the tensor) a copy with an FP8 scale of 0 or NaN, an FP8 module in no
# config group, an FP8 weight retyped U8, an input_scale beside an FP8 module; dequantize
# refuses the zero scale and otherwise writes the source's names, dtypes and shapes, and
# verify --against that copy measures 0 error for both schemes; inspect and diff name the
# schemes; fit's weight total is the safetensors bytes; --fp8 with --lora == merge, quantize.
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

# ---- the checking commands on a mixed output (verify, dequantize, inspect, diff, fit) ----
# Tampering: mixed_edit.py DIR OP ARGS rewrites DIR/model.safetensors or DIR/config.json.
#   bytes NAME HEX   the tensor's data set to HEX repeated (a BF16 NaN scale: c07f)
#   dtype NAME DT    the tensor's header dtype changed, data untouched
#   untarget MODULE  the module's exact name taken out of every config group's targets
#   add NAME         a new F32 [1] tensor (value 1) at the end
cat > "$W/mixed_edit.py" <<'PY2'
import json, struct, sys
d, op, name, arg = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None
if op == "untarget":
    c = json.load(open(f"{d}/config.json"))
    for g in c["quantization_config"]["config_groups"].values():
        g["targets"] = [t for t in g["targets"] if t != name]
    json.dump(c, open(f"{d}/config.json", "w"), indent=2)
    sys.exit(0)
p = f"{d}/model.safetensors"
b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
if op == "bytes":
    lo, hi = h[name]["data_offsets"]; pat = bytes.fromhex(arg)
    b[8 + n + lo:8 + n + hi] = (pat * ((hi - lo) // len(pat) + 1))[:hi - lo]
elif op in ("dtype", "add"):
    if op == "dtype":
        h[name]["dtype"] = arg
    else:
        end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
        h[name] = {"dtype": "F32", "shape": [1], "data_offsets": [end, end + 4]}
        b += struct.pack("<f", 1.0)
    hj = json.dumps(h, separators=(",", ":")).encode(); hj += b" " * (-len(hj) % 8)
    b = bytearray(struct.pack("<Q", len(hj)) + hj + b[8 + n:])
open(p, "wb").write(b)
PY2
Q=$W/q; M=model.language_model.layers.1.self_attn.q_proj
if [ -d "$Q" ]; then
    $FF verify "$Q" > "$W/mixed_verify_passes.vout" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "(.* NVFP4, [1-9][0-9]* FP8 weight-only)" "$W/mixed_verify_passes.vout"; then
        pass mixed_verify_passes "$(grep decode "$W/mixed_verify_passes.vout" | sed 's/^ *//' | tr -s ' ')"
    else fail mixed_verify_passes "rc=$rc: $(grep -m3 -E 'FAIL|^ {9}' "$W/mixed_verify_passes.vout" | tr -s ' ' | paste -sd' ')"; fi
    $FF verify "$Q" --against "$W/dense" > "$W/mixed_verify_against.vout" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "(NVFP4); FP8 weight-only [1-9][0-9]* tensors: mean rel 0\.0" "$W/mixed_verify_against.vout"; then
        pass mixed_verify_against_passes "$(grep ' error ' "$W/mixed_verify_against.vout" | sed 's/^ *ok *//' | tr -s ' ')"
    else fail mixed_verify_against_passes "rc=$rc: $(grep -m3 -E 'FAIL|^ {9}' "$W/mixed_verify_against.vout" | tr -s ' ' | paste -sd' ')"; fi
    # broken NAME WANT OP ARGS: a copy of Q tampered; verify exits 6 naming WANT
    broken() {
        local name=$1 want=$2; shift 2
        rm -rf "$W/$name"; cp -r "$Q" "$W/$name"; python3 "$W/mixed_edit.py" "$W/$name" "$@"
        $FF verify "$W/$name" > "$W/$name.vout" 2>&1; local rc=$?
        if [ $rc -eq 6 ] && grep -qF -- "$want" "$W/$name.vout"; then pass "$name" "exit 6: $(grep -m1 -F -- "$want" "$W/$name.vout" | sed 's/^ *//' | cut -c1-200)"
        else fail "$name" "rc=$rc: $(grep -m2 -E '^ {9}' "$W/$name.vout" | tr -s ' ' | paste -sd' ' | cut -c1-300)"; fi
    }
    broken mixed_verify_fails_zero_scale "tensor $M.weight_scale: " bytes $M.weight_scale 0000
    broken mixed_verify_fails_nan_scale "tensor $M.weight_scale: " bytes $M.weight_scale c07f
    broken mixed_verify_fails_fp8_in_no_group "$M.weight is naive-quantized but listed in no naive-quantized config group" untarget $M
    broken mixed_verify_fails_fp8_weight_dtype "tensor $M.weight: FP8 module weight is U8" dtype $M.weight U8
    broken mixed_verify_fails_fp8_input_scale "$M.input_scale beside an FP8 weight-only module" add $M.input_scale
    # the zero-scale copy is refused by dequantize too, one line naming the tensor
    $FF dequantize "$W/mixed_verify_fails_zero_scale" "$W/dq-zero" > "$W/dq-zero.out" 2>&1; rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$W/dq-zero.out")" = 1 ] && grep -q "tensor $M.weight_scale: FP8 channel scale of row 0 is 0" "$W/dq-zero.out" && [ ! -e "$W/dq-zero" ]; then
        pass mixed_dequantize_refuses_zero_scale "$(cut -c1-160 "$W/dq-zero.out")"
    else fail mixed_dequantize_refuses_zero_scale "rc=$rc $(head -2 "$W/dq-zero.out" | cut -c1-200)"; fi
    # dequantize: FP8 modules decoded into the source dtype; verify against that copy measures
    # exactly 0 error for both schemes (the decode verify measures is the one dequantize writes)
    if $FF dequantize "$Q" "$W/dq" > "$W/dq.out" 2>&1; then
        got=$(python3 - "$W/dq" "$W/dense" <<'PY2' 2>&1
import json, struct, sys
def hdr(d):
    b = open(f"{d}/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; return json.loads(b[8:8 + n])
a, s = hdr(sys.argv[1]), hdr(sys.argv[2]); a.pop("__metadata__", None); s.pop("__metadata__", None)
same = sorted(a) == sorted(s) and all(a[k]["dtype"] == s[k]["dtype"] and a[k]["shape"] == s[k]["shape"] for k in a)
print("ok" if same else "bad", len(a), "tensors, names/dtypes/shapes as the source:", same)
PY2
)
        case "$got" in ok*) pass mixed_dequantize "$got";; *) fail mixed_dequantize "$got";; esac
        $FF verify "$Q" --against "$W/dq" > "$W/dq-v.out" 2>&1; rc=$?
        if [ $rc -eq 0 ] && grep -q "mean rel 0.0000, max rel 0.0000, .* (NVFP4); FP8 weight-only [1-9][0-9]* tensors: mean rel 0.0000, max rel 0.0000" "$W/dq-v.out"; then
            pass mixed_verify_against_dequantized_zero_error "$(grep ' error ' "$W/dq-v.out" | sed 's/^ *ok *//' | tr -s ' ' | cut -c1-200)"
        else fail mixed_verify_against_dequantized_zero_error "rc=$rc $(grep ' error ' "$W/dq-v.out")"; fi
    else fail mixed_dequantize "$(tail -1 "$W/dq.out")"; fi
    # inspect names the groups and the FP8 modules; diff names the scheme of each side
    $FF inspect "$Q" > "$W/inspect.out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^  schemes    [1-9][0-9]* NVFP4A16, [1-9][0-9]* FP8 weight-only" "$W/inspect.out" && grep -q "group_0 naive-quantized: 8-bit float channel" "$W/inspect.out"; then
        pass mixed_inspect "$(grep schemes "$W/inspect.out" | sed 's/^ *//' | tr -s ' ')"
    else fail mixed_inspect "rc=$rc $(grep -E 'quant|scheme|group' "$W/inspect.out" | paste -sd' ')"; fi
    $FF diff "$Q" "$W/plain" > "$W/diff.out" 2>&1; rc=$?
    if grep -q "^  schemes  A [1-9][0-9]* NVFP4A16, [1-9][0-9]* FP8 weight-only .* B [1-9][0-9]* NVFP4A16, 0 FP8 weight-only" "$W/diff.out" \
        && grep -q "FP8 weight-only in A, NVFP4A16 in B: model.language_model.layers.N.self_attn" "$W/diff.out"; then
        pass mixed_diff_schemes "rc=$rc: $(grep schemes "$W/diff.out" | sed 's/^ *//' | tr -s ' ')"
    else fail mixed_diff_schemes "rc=$rc $(grep -E 'scheme' "$W/diff.out" | head -3 | paste -sd' ')"; fi
    # fit: runs, and its weight total is the safetensors data bytes
    $FF fit "$Q" --json > "$W/fit.json" 2> "$W/fit.err"
    got=$(python3 - "$Q" "$W/fit.json" <<'PY2' 2>&1
import glob, json, struct, sys
tot = 0
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    b = open(f, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    tot += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__")
j = json.load(open(sys.argv[2]))
c = j["columns"][0]
w = c["weights"]
kinds = {k: v for k, v in c["weights_by_kind"].items() if v} if isinstance(c.get("weights_by_kind"), dict) else c.get("weights_by_kind")
print("ok" if w == tot else "bad", "fit weights", w, "safetensors data bytes", tot, "by kind", kinds)
PY2
)
    case "$got" in ok*) pass mixed_fit_weights "$got";; *) fail mixed_fit_weights "$got $(head -1 "$W/fit.err")";; esac
fi

# quantize --fp8 --lora ADAPTER == merge, then quantize --fp8 (an adapter on an FP8 module)
python3 "$(dirname "$0")/make_adapter.py" "$W/dense" $M "$W/adapter" > /dev/null 2>&1
$FF_FAST quantize "$W/dense" "$W/ql1" --fp8 self_attn --lora "$W/adapter" --no-doctor --quiet > "$W/ql1.out" 2>&1; r1=$?
$FF_FAST merge "$W/dense" "$W/adapter" "$W/merged" > "$W/merged.out" 2>&1; r2=$?
$FF_FAST quantize "$W/merged" "$W/ql2" --fp8 self_attn --no-doctor --quiet > "$W/ql2.out" 2>&1; r3=$?
bad=$(bash "$(dirname "$0")/../same_output.sh" "$W/ql1" "$W/ql2")
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ] && [ -z "$bad" ] && ! cmp -s "$W/ql1/model.safetensors" "$W/q/model.safetensors" \
    && $FF verify "$W/ql1" --against "$W/merged" > "$W/ql1-v.out" 2>&1; then
    pass mixed_lora_one_pass_equals_merge_then_quantize "$(ls "$W/ql1" | wc -l) files identical, verify --against the merged copy passes"
else fail mixed_lora_one_pass_equals_merge_then_quantize "rc $r1/$r2/$r3 differ:$bad $(tail -1 "$W/ql1.out")"; fi
exit $GOLDEN_RC

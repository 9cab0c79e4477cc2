#!/usr/bin/env bash
# Wrong output with exit 0 (issue 35, H6-H10): inputs that are not what they
# claim, or NVFP4 checkpoints tampered as a broken tool or a hostile upload
# would leave them. dequantize and repair-scales refuse them (exit 1, one line
# naming the folder or file and the tensor, nothing written); verify fails
# them (exit 6) naming the module; quantize drops a static FP8 source's
# input_scale and refuses a weight_scale_inv beside a 16-bit weight. Tampering
# is python3 with struct/json only, on tiny synthetic checkpoints.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/hostile; rm -rf "$W"; mkdir -p "$W"
ok() { if [ "$1" = 0 ]; then pass "$2" "${3:-}"; else fail "$2" "${3:-}"; fi; }
one_line() { [ "$(wc -l < "$1")" = 1 ]; }
# nothing DIR: neither DIR nor a staged DIR.partial-* was left behind
nothing() { [ ! -e "$1" ] && ! ls -d "$1".partial-* > /dev/null 2>&1; }
head1() { head -c 300 "$1" | tr '\n' ' '; }

# stedit FILE OP ARGS [OP ARGS ...]: rewrites one safetensors file in place,
# data laid out again in order.
#   drop NAME | zero NAME | f32 NAME VALUE (every element) | byte NAME INDEX HEX
#   add NAME DTYPE DIMS VALUE: a new F32 tensor (DIMS comma-separated, '' for a scalar) at the end
cat > "$W/stedit.py" <<'PY'
import json, struct, sys
p, ops = sys.argv[1], sys.argv[2:]
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
meta = h.pop("__metadata__", None)
order = sorted(h, key=lambda k: h[k]["data_offsets"][0])
data = {k: bytearray(d[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]) for k in order}
i = 0
while i < len(ops):
    op = ops[i]
    if op == "drop":
        order.remove(ops[i + 1]); i += 2
    elif op == "zero":
        data[ops[i + 1]][:] = bytes(len(data[ops[i + 1]])); i += 2
    elif op == "f32":
        k, v = ops[i + 1], float(ops[i + 2]); assert h[k]["dtype"] == "F32", k
        data[k][:] = struct.pack("<f", v) * (len(data[k]) // 4); i += 3
    elif op == "byte":
        data[ops[i + 1]][int(ops[i + 2])] = int(ops[i + 3], 16); i += 4
    elif op == "add":
        k, dt, dims, v = ops[i + 1:i + 5]
        shape = [int(x) for x in dims.split(",") if x]
        cnt = 1
        for s in shape:
            cnt *= s
        assert dt == "F32" and k not in h, k
        h[k] = {"dtype": dt, "shape": shape}; data[k] = bytearray(struct.pack("<f", float(v)) * cnt)
        order.append(k); i += 5
    else:
        sys.exit("stedit: unknown op " + op)
hdr, off, body = {}, 0, bytearray()
if meta is not None:
    hdr["__metadata__"] = meta
for k in order:
    hdr[k] = {"dtype": h[k]["dtype"], "shape": h[k]["shape"], "data_offsets": [off, off + len(data[k])]}
    body += data[k]; off += len(data[k])
hj = json.dumps(hdr, separators=(",", ":")).encode()
hj += b" " * (-len(hj) % 8)
open(p, "wb").write(struct.pack("<Q", len(hj)) + hj + bytes(body))
PY
stedit() { python3 "$W/stedit.py" "$@"; }
# names DIR: every tensor name of DIR/model.safetensors, one a line
names() {
    python3 -c 'import json,struct,sys; f=open(sys.argv[1]+"/model.safetensors","rb"); n=struct.unpack("<Q",f.read(8))[0]
print("\n".join(k for k in json.loads(f.read(n)) if k != "__metadata__"))' "$1"
}
# copy NAME: a fresh copy of the clean NVFP4 checkpoint as $W/NAME
copy() { rm -rf "$W/$1"; cp -r "$W/q" "$W/$1"; }

L=model.layers.0.self_attn
$FF_FAST synth --arch qwen3-moe "$W/src" > /dev/null \
    && $FF_FAST quantize --no-doctor "$W/src" "$W/q" --quiet > /dev/null \
    && $FF_FAST synth --arch deepseek-v3 --source fp8-block "$W/ds-fp8" > /dev/null \
    && $FF_FAST synth --arch minimax-m2 --source fp8-block "$W/mm-fp8" > /dev/null; ok $? ho_setup
$FF verify "$W/q" > "$W/clean.out"; ok $? ho_clean_output_verifies

# ---- H6: dequantize reads NVFP4 only ---------------------------------------------
for case in ds-fp8:FP8-block mm-fp8:FP8-block src:unquantized; do
    d=${case%%:*}; what=${case#*:}
    $FF dequantize "$W/$d" "$W/dq-$d" > "$W/dq-$d.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/dq-$d.out" && grep -q "$W/$d: .*$what.*not NVFP4: dequantize reads NVFP4" "$W/dq-$d.out" \
        && nothing "$W/dq-$d"; ok $? "ho_dequantize_refuses_$d" "rc=$r: $(head1 "$W/dq-$d.out")"
done
$FF dequantize "$W/q" "$W/dq-q" > /dev/null 2>&1; ok $? ho_dequantize_nvfp4_still_works

# ---- H7: a quantized module missing one of its three tensors ---------------------------
# weight_packed gone, its scales left; then one planted scale difference in the
# same group so repair-scales has something to repair
copy nopacked && stedit "$W/nopacked/model.safetensors" drop $L.k_proj.weight_packed
copy nopacked2 && stedit "$W/nopacked2/model.safetensors" drop $L.k_proj.weight_packed f32 $L.q_proj.weight_global_scale 40000
$FF verify "$W/nopacked" > "$W/np-v.out"; r=$?
[ $r = 6 ] && grep -q "FAIL decode" "$W/np-v.out" && grep -q "$L.k_proj has weight_global_scale but no weight_packed" "$W/np-v.out"
ok $? ho_missing_packed_verify_fails "rc=$r"
$FF dequantize "$W/nopacked" "$W/np-dq" > "$W/np-dq.out" 2>&1; r=$?
[ $r = 1 ] && one_line "$W/np-dq.out" && grep -q "nopacked/model.safetensors: tensor $L.k_proj.weight_scale: module $L.k_proj has a weight_scale but no weight_packed" "$W/np-dq.out" \
    && nothing "$W/np-dq"; ok $? ho_missing_packed_dequantize_refuses "rc=$r: $(head1 "$W/np-dq.out")"
for d in nopacked nopacked2; do
    $FF repair-scales "$W/$d" "$W/$d-rep" > "$W/$d-rep.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/$d-rep.out" && grep -q "module $L.k_proj has a weight_scale but no weight_packed" "$W/$d-rep.out" \
        && nothing "$W/$d-rep"; ok $? "ho_missing_packed_repair_refuses_$d" "rc=$r: $(head1 "$W/$d-rep.out")"
done
# weight_packed there, one scale gone
for part in weight_scale weight_global_scale; do
    copy "no-$part" && stedit "$W/no-$part/model.safetensors" drop $L.k_proj.$part f32 $L.q_proj.weight_global_scale 40000
    $FF verify "$W/no-$part" > "$W/no-$part-v.out"; r=$?
    [ $r = 6 ] && grep -q "no-$part: $L.k_proj: quantized module lacks $part" "$W/no-$part-v.out"; ok $? "ho_missing_${part}_verify_fails" "rc=$r"
    $FF dequantize "$W/no-$part" "$W/no-$part-dq" > "$W/no-$part-dq.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/no-$part-dq.out" && grep -q "no-$part: $L.k_proj: quantized module lacks $part" "$W/no-$part-dq.out" \
        && nothing "$W/no-$part-dq"; ok $? "ho_missing_${part}_dequantize_refuses" "rc=$r: $(head1 "$W/no-$part-dq.out")"
    $FF repair-scales "$W/no-$part" "$W/no-$part-rep" > "$W/no-$part-rep.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/no-$part-rep.out" && grep -q "$L.k_proj: quantized module lacks $part" "$W/no-$part-rep.out" \
        && nothing "$W/no-$part-rep"; ok $? "ho_missing_${part}_repair_refuses" "rc=$r: $(head1 "$W/no-$part-rep.out")"
done

# ---- H8: source-quantization scales do not reach the NVFP4 output ------------------------
# an FP8-block source with static activations: an input_scale beside every FP8 weight
rm -rf "$W/static"; cp -r "$W/ds-fp8" "$W/static"
python3 - "$W/static" "$W/stedit.py" <<'PY'
import json, subprocess, struct, sys
d, ed = sys.argv[1], sys.argv[2]
c = json.load(open(d + "/config.json")); c["quantization_config"]["activation_scheme"] = "static"
json.dump(c, open(d + "/config.json", "w"), indent=2)
f = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); f.close()
ops = []
for k in h:
    if k.endswith(".weight_scale_inv"):
        ops += ["add", k[:-len("_scale_inv")][:-len(".weight")] + ".input_scale", "F32", "", "0.0123"]
subprocess.check_call(["python3", ed, d + "/model.safetensors"] + ops)
PY
$FF_FAST quantize --no-doctor "$W/ds-fp8" "$W/ds-q" --quiet > /dev/null 2>&1
$FF quantize --no-doctor "$W/static" "$W/static-q" > "$W/static-q.out" 2>&1; r=$?
n=$(grep -c '\.input_scale$' <(names "$W/static")); left=$(names "$W/static-q" | grep -c 'input_scale$')
[ $r = 0 ] && [ "$n" -gt 100 ] && [ "$left" = 0 ] && grep -q "note: $n input_scale tensors dropped: static FP8 activation scales" "$W/static-q.out" \
    && cmp -s "$W/ds-q/model.safetensors" "$W/static-q/model.safetensors"
ok $? ho_static_fp8_input_scale_dropped "rc=$r: $n in the source, $left in the output, every other byte as without them"
$FF verify "$W/static-q" > /dev/null; ok $? ho_static_fp8_output_verifies
# a bf16 source with an input_scale beside a quantized Linear: dropped, and
# verify --against counts it as accounted for
rm -rf "$W/bf-is"; cp -r "$W/src" "$W/bf-is"; stedit "$W/bf-is/model.safetensors" add $L.o_proj.input_scale F32 "" 0.5
$FF quantize --no-doctor "$W/bf-is" "$W/bf-is-q" --quiet > /dev/null 2>&1; r=$?
[ $r = 0 ] && ! names "$W/bf-is-q" | grep -q input_scale && $FF verify "$W/bf-is-q" --against "$W/bf-is" > "$W/bf-is-v.out"
ok $? ho_input_scale_dropped_verify_against "rc=$r: $(grep -E 'coverage|verdict' "$W/bf-is-v.out" | tr -s ' ' | tr '\n' ' ')"
# a weight_scale_inv beside a 16-bit weight: bad input, in a bf16 source and in an FP8-block one
rm -rf "$W/inv-bf"; cp -r "$W/src" "$W/inv-bf"; stedit "$W/inv-bf/model.safetensors" add model.layers.1.mlp.experts.0.up_proj.weight_scale_inv F32 1,2 1
rm -rf "$W/inv-fp8"; cp -r "$W/ds-fp8" "$W/inv-fp8"; stedit "$W/inv-fp8/model.safetensors" add lm_head.weight_scale_inv F32 16,2 1
for case in inv-bf:model.layers.1.mlp.experts.0.up_proj inv-fp8:lm_head; do
    d=${case%%:*}; m=${case#*:}
    $FF quantize --no-doctor "$W/$d" "$W/$d-q" > "$W/$d-q.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/$d-q.out" && grep -q "$d/model.safetensors: tensor $m.weight_scale_inv: an FP8-block scale beside $m.weight, which is BF16" "$W/$d-q.out" \
        && nothing "$W/$d-q"; ok $? "ho_scale_inv_beside_bf16_refused_$d" "rc=$r: $(head1 "$W/$d-q.out")"
done
# someone else's output carrying them: verify fails, dequantize refuses
for s in input_scale weight_scale_inv; do
    copy "stray-$s" && stedit "$W/stray-$s/model.safetensors" add $L.o_proj.$s F32 "" 1
    $FF verify "$W/stray-$s" > "$W/stray-$s-v.out"; r=$?
    [ $r = 6 ] && grep -q "FAIL stray_scales" "$W/stray-$s-v.out" && grep -q "$L.o_proj.$s: a scale of the source's FP8 quantization beside an NVFP4 module" "$W/stray-$s-v.out"
    ok $? "ho_verify_fails_stray_$s" "rc=$r"
    $FF dequantize "$W/stray-$s" "$W/stray-$s-dq" > "$W/stray-$s-dq.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/stray-$s-dq.out" && grep -q "tensor $L.o_proj.$s: $s beside an NVFP4 module" "$W/stray-$s-dq.out" \
        && nothing "$W/stray-$s-dq"; ok $? "ho_dequantize_refuses_stray_$s" "rc=$r: $(head1 "$W/stray-$s-dq.out")"
done

# ---- H9: repair-scales must not zero the other members' block scales ---------------------
# one member's global scale tiny: 1e-30 (normal: every other block scale would
# round to 0), 1.4e-45 (subnormal), 2 (the others' scales fall among E4M3's
# subnormals, values move ~10%); 5 moves two scales into the subnormals within
# E4M3's rounding and is repaired
for case in 1e-30:"would zero [0-9]* of its block scales over non-zero codes" \
            1.4e-45:"is not a positive, finite, normal number; cannot repair its group $L|qkv" \
            2:"would move [0-9]* of its blocks by more than E4M3's rounding"; do
    v=${case%%:*}; why=${case#*:}
    copy "tiny-$v" && stedit "$W/tiny-$v/model.safetensors" f32 $L.k_proj.weight_global_scale "$v"
    $FF repair-scales "$W/tiny-$v" "$W/tiny-$v-rep" > "$W/tiny-$v.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/tiny-$v.out" && grep -q "$why" "$W/tiny-$v.out" && grep -q "$L.k_proj" "$W/tiny-$v.out" \
        && { [ "$v" = 1.4e-45 ] || grep -q "group $L|qkv: re-expressing $L.q_proj" "$W/tiny-$v.out"; } \
        && nothing "$W/tiny-$v-rep"; ok $? "ho_repair_refuses_global_$v" "rc=$r: $(head1 "$W/tiny-$v.out")"
done
copy tiny-5 && stedit "$W/tiny-5/model.safetensors" f32 $L.k_proj.weight_global_scale 5
$FF repair-scales --json "$W/tiny-5" "$W/tiny-5-rep" > "$W/tiny-5.json" 2>&1; r=$?
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["underflow_subnormal"] > 0 and j["underflow_zero"] == 0 and j["worst_rel_error"] < 0.0709, j' "$W/tiny-5.json" \
    && $FF verify "$W/tiny-5-rep" > /dev/null; ok $((r|$?)) ho_repair_subnormal_within_rounding "rc=$r"
# what the old repair wrote for 1e-30: every block scale of q_proj and v_proj zero
copy zeroed && stedit "$W/zeroed/model.safetensors" zero $L.q_proj.weight_scale zero $L.v_proj.weight_scale \
    f32 $L.q_proj.weight_global_scale 1e-30 f32 $L.k_proj.weight_global_scale 1e-30 f32 $L.v_proj.weight_global_scale 1e-30
$FF verify "$W/zeroed" > "$W/zeroed.out"; r=$?
[ $r = 6 ] && grep -q "FAIL decode" "$W/zeroed.out" && grep -q "$L.q_proj: 4096 blocks with non-zero codes have a zero block scale" "$W/zeroed.out" \
    && grep -q "$L.v_proj: 2048 blocks with non-zero codes have a zero block scale" "$W/zeroed.out"; ok $? ho_verify_fails_zeroed_block_scales "rc=$r"

# ---- H10: a global scale that is 0, NaN, Inf, negative or subnormal ---------------------
# o_proj stands alone (no fused group), so only the decode check can see it
for v in 0 nan inf -inf -3 1e-40; do
    copy "gs-$v" && stedit "$W/gs-$v/model.safetensors" f32 $L.o_proj.weight_global_scale "$v"
    $FF dequantize "$W/gs-$v" "$W/gs-$v-dq" > "$W/gs-$v-dq.out" 2>&1; r=$?
    [ $r = 1 ] && one_line "$W/gs-$v-dq.out" && grep -q "gs-$v/model.safetensors: tensor $L.o_proj.weight_global_scale: global scale .* is not a positive, finite, normal number" "$W/gs-$v-dq.out" \
        && nothing "$W/gs-$v-dq"; ok $? "ho_dequantize_refuses_global_$v" "rc=$r: $(head1 "$W/gs-$v-dq.out")"
    $FF verify "$W/gs-$v" > "$W/gs-$v-v.out"; r=$?
    [ $r = 6 ] && grep -q "tensor $L.o_proj.weight_global_scale: global scale" "$W/gs-$v-v.out"; ok $? "ho_verify_fails_global_$v" "rc=$r"
done
# a NaN block scale: dequantize refuses instead of writing NaN weights
copy nanblock && stedit "$W/nanblock/model.safetensors" byte $L.o_proj.weight_scale 5 7f
$FF dequantize "$W/nanblock" "$W/nanblock-dq" > "$W/nanblock.out" 2>&1; r=$?
[ $r = 1 ] && one_line "$W/nanblock.out" && grep -q "tensor $L.o_proj.weight_scale: module $L.o_proj decodes to 16 NaN/Inf values" "$W/nanblock.out" \
    && nothing "$W/nanblock-dq"; ok $? ho_dequantize_refuses_nan_block_scale "rc=$r: $(head1 "$W/nanblock.out")"

exit $GOLDEN_RC

#!/usr/bin/env bash
# repair-scales: on synthetic Gemma-4 MoE and Qwen3-MoE checkpoints, quantized
# and then planted with fused pieces that carry their own global scale (a
# peer that quantized q/k/v or an expert's gate/up separately: the piece's
# global scale and its FP8 block scales multiplied by one factor, so it still
# dequantizes about the same), verify fails before and passes after; the
# error the repair reports bounds what dequantize shows; the input is left
# alone; --against re-quantizes to quantize's own bytes; bad input is refused.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/repair; rm -rf "$W"; mkdir -p "$W"
ok() { if [ "$1" = 0 ]; then pass "$2" "${3:-}"; else fail "$2" "${3:-}"; fi; }

# plant DIR FACTOR MODULE...: multiplies each module's weight_global_scale and
# every FP8 weight_scale by FACTOR (E4M3 round to nearest even), in place.
plant() {
    python3 - "$@" <<'PY'
import json, math, struct, sys
d, f, mods = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
def dec(b):
    e, m = (b >> 3) & 15, b & 7
    x = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -x if b & 0x80 else x
POS = [dec(b) for b in range(0x7f)]          # 0 .. 448, increasing
def enc(x):                                  # x >= 0, <= 448: nearest, ties to even
    return min(range(0x7f), key=lambda b: (abs(POS[b] - x), b & 1))
p = d + "/model.safetensors"
with open(p, "r+b") as fh:
    n = struct.unpack("<Q", fh.read(8))[0]
    h = json.loads(fh.read(n))
    for m in mods:
        s0, s1 = h[m + ".weight_scale"]["data_offsets"]
        fh.seek(8 + n + s0); sc = fh.read(s1 - s0)
        assert max(dec(b) for b in sc) * f <= 448, m
        fh.seek(8 + n + s0); fh.write(bytes(enc(dec(b) * f) for b in sc))
        g0 = h[m + ".weight_global_scale"]["data_offsets"][0]
        fh.seek(8 + n + g0); g = struct.unpack("<f", fh.read(4))[0]
        fh.seek(8 + n + g0); fh.write(struct.pack("<f", g * f))
PY
}
# tensors DIR: name -> sha256 of its bytes, one a line
tensors() {
    python3 - "$1" <<'PY'
import hashlib, json, struct, sys
p = sys.argv[1] + "/model.safetensors"
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
for k, v in sorted(h.items()):
    if k != "__metadata__":
        s, e = v["data_offsets"]; print(k, hashlib.sha256(b[8 + n + s:8 + n + e]).hexdigest())
PY
}
# maxrel A B: worst |b - a| / |a| over every bf16 element of two dequantized checkpoints (a != 0)
maxrel() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(d):
    b = open(d + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
worst = 0.0
for k, v in ha.items():
    if k == "__metadata__" or v["dtype"] != "BF16":
        continue
    s, e = v["data_offsets"]; t, u = hb[k]["data_offsets"]
    if da[s:e] == db[t:u]:
        continue
    xa = struct.unpack("<%dH" % ((e - s) // 2), da[s:e]); xb = struct.unpack("<%dH" % ((u - t) // 2), db[t:u])
    for a, c in zip(xa, xb):
        if a != c:
            fa = struct.unpack("<f", struct.pack("<I", a << 16))[0]; fb = struct.unpack("<f", struct.pack("<I", c << 16))[0]
            if fa != 0:
                worst = max(worst, abs(fb - fa) / abs(fa))
print("%.9g" % worst)
PY
}
sums() { (cd "$1" && sha256sum $(ls | sort)); }

# ---- Gemma-4 MoE -------------------------------------------------------------
G=model.language_model.layers
$FF_FAST synth --arch gemma4-moe "$W/g-src" > /dev/null \
    && $FF_FAST quantize --no-doctor "$W/g-src" "$W/g-q" --quiet > /dev/null; ok $? rs_setup_gemma4_moe

# a clean checkpoint: nothing to repair, an identical copy, exit 0
$FF repair-scales "$W/g-q" "$W/g-clean" > "$W/clean.out" 2>&1; r=$?
[ $r = 0 ] && grep -q "nothing to repair" "$W/clean.out" && cmp -s "$W/g-q/model.safetensors" "$W/g-clean/model.safetensors" \
    && cmp -s "$W/g-q/config.json" "$W/g-clean/config.json"; ok $? rs_nothing_to_repair "rc=$r"

# planted: k_proj x0.5 (exact in E4M3: the repair is lossless), layer 1's q_proj
# x0.75 and mlp.up_proj x0.75 (inexact), two experts' gate/up pieces
cp -r "$W/g-q" "$W/g-planted"
plant "$W/g-planted" 0.5 $G.0.self_attn.k_proj $G.0.experts.3.up_proj
plant "$W/g-planted" 0.75 $G.1.self_attn.q_proj $G.1.mlp.up_proj
plant "$W/g-planted" 0.3 $G.2.experts.5.gate_proj
sums "$W/g-planted" > "$W/planted.sha"

$FF verify "$W/g-planted" > "$W/v-before.out"; r=$?
[ $r = 6 ] && grep -q "FAIL fused_scales" "$W/v-before.out" \
    && [ "$(grep -c 'global scales differ in a fused group' "$W/v-before.out")" = 5 ]; ok $? rs_verify_fails_before "rc=$r"

$FF repair-scales --json "$W/g-planted" "$W/g-rep" > "$W/rep.json" 2> "$W/rep.err"; r=$?
python3 - "$W/rep.json" <<'PY'; ok $((r|$?)) rs_repair_reports "rc=$r"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["mode"] == "rescale" and j["repaired_groups"] == 5 and j["repaired_modules"] == 12, j
g = {x["group"]: x for x in j["groups"]}
exact = g["model.language_model.layers.0.self_attn|qkv"]
assert exact["worst_rel_error"] == 0 and exact["scales_changed"] > 0, exact   # x0.5 is exact
assert 0 < j["worst_rel_error"] < 0.07, j["worst_rel_error"]   # E4M3 half ulp: 1/16 at most (bf16 aside)
PY
WORST=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.9g" % j["worst_rel_error"])' "$W/rep.json")

$FF repair-scales "$W/g-planted" "$W/g-rep-text" > "$W/rep.txt" 2>&1; r=$?
[ $r = 0 ] && grep -q "5 of .* fused groups had different global scales (12 modules)" "$W/rep.txt" \
    && grep -q "worst relative error introduced: " "$W/rep.txt" \
    && cmp -s "$W/g-rep/model.safetensors" "$W/g-rep-text/model.safetensors"; ok $? rs_repair_text "rc=$r"

$FF verify "$W/g-rep" > "$W/v-after.out"; ok $? rs_verify_passes_after
$FF verify "$W/g-rep" --against "$W/g-src" > "$W/v-after-src.out"; ok $? rs_verify_against_source_after

# what dequantize shows moves by no more than the report says
$FF_FAST dequantize "$W/g-planted" "$W/g-dq-planted" > /dev/null && $FF_FAST dequantize "$W/g-rep" "$W/g-dq-rep" > /dev/null
M=$(maxrel "$W/g-dq-planted" "$W/g-dq-rep")
python3 -c "import sys; m, w = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if 0 < m <= w * (1 + 1e-9) else 1)" "$M" "$WORST"
ok $? rs_dequant_within_report "measured $M, reported $WORST"

# k_proj's x0.5 repair is lossless: layer 0's attention dequantizes bit for bit as before planting
$FF_FAST dequantize "$W/g-q" "$W/g-dq-q" > /dev/null
diff <(tensors "$W/g-dq-q" | grep "layers\.0\.self_attn\.") <(tensors "$W/g-dq-rep" | grep "layers\.0\.self_attn\.") > /dev/null
ok $? rs_exact_factor_lossless

# only the repaired groups' scales changed: codes and every other tensor byte for byte
diff <(tensors "$W/g-planted") <(tensors "$W/g-rep") | grep '^>' | awk '{print $2}' > "$W/changed.txt"
! grep -qv -E '\.weight_(scale|global_scale)$' "$W/changed.txt" \
    && ! grep -v -E "layers\.0\.self_attn\.|layers\.0\.experts\.3\.|layers\.1\.self_attn\.|layers\.1\.mlp\.(gate|up)_proj|layers\.2\.experts\.5\." "$W/changed.txt" | grep -q . \
    && ! grep -q -E "o_proj|down_proj" "$W/changed.txt"
ok $? rs_only_repaired_scales_change "$(wc -l < "$W/changed.txt") tensors changed"
cmp -s "$W/g-planted/config.json" "$W/g-rep/config.json" && cmp -s "$W/g-planted/tokenizer_config.json" "$W/g-rep/tokenizer_config.json" \
    && cmp -s "$W/g-planted/chat_template.jinja" "$W/g-rep/chat_template.jinja"; ok $? rs_aux_carried

# sharded both ways: written in 4 MB shards, then read back as the input
$FF repair-scales "$W/g-planted" "$W/g-rep-sh" --shard-size 4MB > /dev/null 2>&1 \
    && [ -f "$W/g-rep-sh/model.safetensors.index.json" ] && $FF verify "$W/g-rep-sh" > /dev/null \
    && diff <(tensors "$W/g-rep") <(cd "$W/g-rep-sh" && python3 -c '
import hashlib, json, struct
idx = json.load(open("model.safetensors.index.json"))["weight_map"]
for k in sorted(idx):
    b = open(idx[k], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; s, e = json.loads(b[8:8 + n])[k]["data_offsets"]
    print(k, hashlib.sha256(b[8 + n + s:8 + n + e]).hexdigest())') > /dev/null \
    && $FF repair-scales "$W/g-rep-sh" "$W/g-rep-sh2" 2>&1 | grep -q "nothing to repair"; ok $? rs_sharded

sums "$W/g-planted" | diff - "$W/planted.sha" > /dev/null; ok $? rs_input_untouched

# --against: the affected groups quantized again from the source are quantize's own bytes
$FF repair-scales "$W/g-planted" "$W/g-rep-src" --against "$W/g-src" > "$W/rep-src.out" 2>&1; r=$?
[ $r = 0 ] && grep -q "re-quantized from the source" "$W/rep-src.out" \
    && cmp -s "$W/g-q/model.safetensors" "$W/g-rep-src/model.safetensors"; ok $? rs_against_matches_quantize "rc=$r"
$FF verify "$W/g-rep-src" --against "$W/g-src" > /dev/null; ok $? rs_against_verify_passes

# ---- Qwen3-MoE (Llama-style attention, per-expert gate/up) ----------------------
Q=model.layers
$FF_FAST synth --arch qwen3-moe "$W/q-src" > /dev/null \
    && $FF_FAST quantize --no-doctor "$W/q-src" "$W/q-q" --quiet > /dev/null; ok $? rs_setup_qwen3_moe
cp -r "$W/q-q" "$W/q-planted"
plant "$W/q-planted" 0.75 $Q.1.self_attn.v_proj $Q.0.mlp.experts.2.up_proj
plant "$W/q-planted" 0.5 $Q.0.self_attn.q_proj
$FF verify "$W/q-planted" > "$W/qv-before.out"; r=$?
[ $r = 6 ] && [ "$(grep -c 'global scales differ in a fused group' "$W/qv-before.out")" = 3 ]; ok $? rs_qwen_verify_fails_before "rc=$r"
$FF repair-scales --json "$W/q-planted" "$W/q-rep" > "$W/qrep.json" 2>&1; r=$?
QW=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["repaired_groups"] == 3; print("%.9g" % j["worst_rel_error"])' "$W/qrep.json"); ok $((r|$?)) rs_qwen_repair "rc=$r worst $QW"
$FF verify "$W/q-rep" --against "$W/q-src" > /dev/null; ok $? rs_qwen_verify_passes_after
$FF_FAST dequantize "$W/q-planted" "$W/q-dq-planted" > /dev/null && $FF_FAST dequantize "$W/q-rep" "$W/q-dq-rep" > /dev/null
M=$(maxrel "$W/q-dq-planted" "$W/q-dq-rep")
python3 -c "import sys; m, w = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if m <= w * (1 + 1e-9) else 1)" "$M" "$QW"
ok $? rs_qwen_dequant_within_report "measured $M, reported $QW"
$FF repair-scales "$W/q-planted" "$W/q-rep-src" --against "$W/q-src" > /dev/null 2>&1 \
    && cmp -s "$W/q-q/model.safetensors" "$W/q-rep-src/model.safetensors"; ok $? rs_qwen_against_matches_quantize

# ---- refusals: one line, non-zero, nothing written ---------------------------------
one_line() { [ "$(wc -l < "$1")" = 1 ]; }
$FF repair-scales "$W/g-src" "$W/bad1" > "$W/bad1.out" 2>&1; r=$?
[ $r = 1 ] && one_line "$W/bad1.out" && grep -q "not an NVFP4 checkpoint" "$W/bad1.out" && [ ! -e "$W/bad1" ]; ok $? rs_refuses_bf16 "rc=$r: $(head -c 200 "$W/bad1.out")"
$FF repair-scales "$W/missing" "$W/bad2" > "$W/bad2.out" 2>&1; r=$?
[ $r = 1 ] && one_line "$W/bad2.out" && [ ! -e "$W/bad2" ]; ok $? rs_refuses_missing "rc=$r: $(head -c 200 "$W/bad2.out")"
$FF repair-scales "$W/g-planted" "$W/g-rep" > "$W/bad3.out" 2>&1; r=$?
[ $r != 0 ] && one_line "$W/bad3.out"; ok $? rs_refuses_existing_out "rc=$r"
$FF repair-scales "$W/g-planted" "$W/g-planted" > "$W/bad4.out" 2>&1; r=$?
[ $r = 2 ] && one_line "$W/bad4.out"; ok $? rs_refuses_out_is_in "rc=$r"
cp -r "$W/g-planted" "$W/g-nan"
python3 - "$W/g-nan" <<'PY'
import json, struct, sys
p = sys.argv[1] + "/model.safetensors"
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
    f.seek(8 + n + h["model.language_model.layers.0.self_attn.q_proj.weight_scale"]["data_offsets"][0] + 3); f.write(b"\x7f")
PY
$FF repair-scales "$W/g-nan" "$W/bad5" > "$W/bad5.out" 2>&1; r=$?
[ $r = 1 ] && one_line "$W/bad5.out" && grep -q "NaN" "$W/bad5.out" && [ ! -e "$W/bad5" ] \
    && ! ls -d "$W"/bad5.partial-* > /dev/null 2>&1; ok $? rs_refuses_nan_scale "rc=$r: $(head -c 200 "$W/bad5.out")"
$FF repair-scales "$W/g-planted" "$W/bad6" --against "$W/q-src" > "$W/bad6.out" 2>&1; r=$?
[ $r = 1 ] && one_line "$W/bad6.out" && [ ! -e "$W/bad6" ]; ok $? rs_refuses_wrong_source "rc=$r: $(head -c 200 "$W/bad6.out")"

exit $GOLDEN_RC

#!/usr/bin/env bash
# inspect / verify / diff / dequantize on the real tiny Gemma-4 fixtures, with
# planted faults (byte patches through python3's struct module, no torch).
set -u
FX=${FIXTURES:-/work/shared/fixtures}
W=$WORK/ivd
rm -rf "$W"; mkdir -p "$W/fx"
ok() { if [ "$1" = 0 ]; then echo "PASS $2"; else echo "FAIL $2"; fi; }
if [ ! -f $FX/gemma4-tiny-moe.tar.gz ] || [ ! -f $FX/gemma4-tiny-dense.tar.gz ]; then
    echo "SKIP ivd_fixtures (no $FX)"; exit 0
fi
tar xzf $FX/gemma4-tiny-moe.tar.gz -C "$W/fx" && tar xzf $FX/gemma4-tiny-dense.tar.gz -C "$W/fx"
MOE=$W/fx/gemma4-tiny-moe DENSE=$W/fx/gemma4-tiny-dense
$FF_FAST quantize --no-doctor "$MOE" "$W/moe" --quiet >/dev/null
$FF_FAST quantize --no-doctor "$DENSE" "$W/dense" --quiet >/dev/null
$FF_FAST quantize --no-doctor "$MOE" "$W/moe-routers" --quiet --allow-router-quantization \
    --only 'language_model.*(self_attn|mlp|experts|router)' >/dev/null

# patch DIR TENSOR OFFSET_IN_TENSOR FORMAT VALUE: overwrite bytes of one tensor
patch() {
    python3 - "$@" <<'PY'
import json, struct, sys
d, name, off, fmt, val = sys.argv[1:6]
p = d + "/model.safetensors"
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    f.seek(8 + n + h[name]["data_offsets"][0] + int(off))
    f.write(struct.pack(fmt, float(val) if fmt.endswith("f") else int(val)))
PY
}
# drop DIR TENSOR: rewrite the file without one tensor
drop() {
    python3 - "$@" <<'PY'
import json, struct, sys
d, name = sys.argv[1:3]
p = d + "/model.safetensors"
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
out, blobs, pos = {}, [], 0
for k, v in h.items():
    if k == "__metadata__": out[k] = v; continue
    if k == name: continue
    s, e = v["data_offsets"]; blobs.append(data[s:e])
    out[k] = dict(v, data_offsets=[pos, pos + e - s]); pos += e - s
hb = json.dumps(out).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
PY
}

$FF inspect "$W/moe" > "$W/insp.txt"; r=$?
grep -q "gemma4 moe, 12 layers, 8 experts, vision present" "$W/insp.txt" && grep -Eq "experts +U8 +weight_packed +288" "$W/insp.txt"; ok $((r|$?)) ivd_inspect_table
$FF inspect --json "$W/moe" | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["class"]["class"]=="moe" and j["input_activations"] is None'; ok $? ivd_inspect_json

$FF verify "$W/moe" --against "$MOE" > "$W/v1.txt"; ok $? ivd_verify_moe_passes
$FF verify "$W/dense" --against "$DENSE" > "$W/v2.txt"; ok $? ivd_verify_dense_passes
$FF verify "$W/moe" > /dev/null; ok $? ivd_verify_alone_passes
$FF verify --json "$W/moe" --against "$MOE" | python3 -c '
import json,sys; j=json.load(sys.stdin); e=j["error"]
assert j["ok"] and 0.05 < e["mean_rel_error"] < 0.15 and e["min_snr_db"] > 15, e'; ok $? ivd_verify_json_figures

# router-quantized control: diff names the routers and fails; verify fails
$FF diff "$W/moe" "$W/moe-routers" > "$W/d1.txt"; r=$?
[ $r = 6 ] && grep -q "12 missing from B's ignore list: model.language_model.layers.N.router.proj" "$W/d1.txt" \
    && [ "$(grep -c '^      model.language_model.layers.[0-9]*.router.proj$' "$W/d1.txt")" = 12 ]; ok $? ivd_diff_names_routers
$FF verify "$W/moe-routers" --against "$MOE" > "$W/v3.txt"; r=$?
[ $r = 6 ] && grep -q "FAIL guarded_not_quantized" "$W/v3.txt"; ok $? ivd_verify_catches_routers
$FF diff "$W/moe" "$W/dense" > "$W/d2.txt" 2>&1; r=$?
[ $r = 5 ] && grep -q "cannot distinguish" "$W/d2.txt"; ok $? ivd_diff_refuses_class
$FF diff "$W/moe" "$W/dense" --allow-class-mismatch > /dev/null 2>&1; [ $? = 6 ]; ok $? ivd_diff_allow_mismatch
$FF diff "$W/moe" "$W/moe" > /dev/null; ok $? ivd_diff_same

cp -r "$W/moe" "$W/nan"
patch "$W/nan" model.language_model.layers.3.mlp.down_proj.weight_scale 5 "<B" 127
$FF verify "$W/nan" > "$W/v4.txt"; r=$?
[ $r = 6 ] && grep -A1 "FAIL decode" "$W/v4.txt" | grep -q "layers.3.mlp.down_proj: .* NaN"; ok $? ivd_verify_nan_scale

cp -r "$W/moe" "$W/gs"
patch "$W/gs" model.language_model.layers.0.self_attn.k_proj.weight_global_scale 0 "<f" 123.5
$FF verify "$W/gs" > "$W/v5.txt"; r=$?
[ $r = 6 ] && grep -A2 "FAIL fused_scales" "$W/v5.txt" | grep -q "global scales differ in a fused group.*layers.0.self_attn.k_proj 123.5"; ok $? ivd_verify_qkv_scale

cp -r "$W/moe" "$W/novis"
drop "$W/novis" model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight
$FF verify "$W/novis" --against "$MOE" > "$W/v6.txt"; r=$?
[ $r = 6 ] && grep -A1 "FAIL coverage" "$W/v6.txt" | grep -q "vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight is in the source but not"; ok $? ivd_verify_missing_vision

cp -r "$W/moe" "$W/tok"
echo '{"version": "1.0", "truncation": {"max_length": 8, "strategy": "LongestFirst"}, "padding": null}' > "$W/tok/tokenizer.json"
$FF verify "$W/tok" > "$W/v7.txt"; r=$?
[ $r = 6 ] && grep -q "FAIL tokenizer" "$W/v7.txt"; ok $? ivd_verify_tokenizer_truncation

$FF dequantize "$W/moe" "$W/dq" > /dev/null; r=$?
python3 - "$W/dq" <<'PY'; ok $((r|$?)) ivd_dequantize_layout
import json, struct, sys
d = sys.argv[1]; f = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n)); c = json.load(open(d + "/config.json"))
w = h["model.language_model.layers.0.experts.3.gate_proj.weight"]
assert w["dtype"] == "BF16" and w["shape"] == [32, 64], w
assert not any(k.endswith(("weight_packed", "weight_scale", "weight_global_scale")) for k in h)
assert "quantization_config" not in c
PY
# a kept tensor of two 8 MiB pieces, which verify reads on the pool: a NaN in
# the first piece named before an Inf in the second, and a byte changed in
# the second found
$FF_FAST synth --layers 1 --hidden 1024 --intermediate 128 --heads 2 --kv-heads 1 --head-dim 32 --vocab 8192 \
    "$W/bigkept" > /dev/null
$FF_FAST quantize --no-doctor --quiet "$W/bigkept" "$W/bigkept-q" > /dev/null
E=model.language_model.embed_tokens.weight
patch "$W/bigkept-q" $E $((2 * 5000001)) "<H" 32640 && patch "$W/bigkept-q" $E $((2 * 3000001)) "<H" 32704 &&
    patch "$W/bigkept-q" $E $((2 * 8000000)) "<H" 1
$FF verify "$W/bigkept-q" --against "$W/bigkept" --threads 3 > "$W/bigkept.txt"; r=$?
[ $r != 0 ] && grep -q "$E: element 3000001 is NaN or infinite" "$W/bigkept.txt" &&
    grep -q "FAIL kept_identical" "$W/bigkept.txt" && grep -q "$E (.*) differs from the source" "$W/bigkept.txt"
ok $? ivd_verify_kept_pieces_on_the_pool
exit 0

#!/usr/bin/env bash
# Messages that said the wrong thing or nothing (issue 35, H15): a base README.md over
# 16 MiB or holding a NUL carried into the card and said so; a 3-D FP8 scale and a 3-D
# embedding table printed with every dimension; tensor names that are not UTF-8 refused by
# the reader, and paths and long names kept in verify's JSON and page; a symbolic link
# loop in the Hugging Face cache named as one; `quantization_config: null` read as none; a
# 1,500-character module name verified against its source; header-only commands under
# `ulimit -v`.
set -u
. "$(dirname "$0")/lib.sh"
WORK=$(realpath -m "$WORK"); W=$WORK/messages2; rm -rf "$W"; mkdir -p "$W"  # absolute: the test cd-s
FF=$(realpath "$FF"); FF_FAST=$(realpath "$FF_FAST")
MOE="--arch qwen3-moe --hidden 64 --intermediate 64 --moe-intermediate 32 --vocab 256 --head-dim 16 --layers 2 --experts 4"
$FF_FAST synth $MOE "$W/tiny" > /dev/null

# header DIR/model.safetensors PYTHON: runs PYTHON with h (the header, a dict) and edits
# it in place; the data section is kept as it is
header() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
def rename(old, new):
    global h
    h = {(new + k[len(old):] if k.startswith(old + ".") else k): v for k, v in h.items()}
exec(code)
hb = json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode()
hb += b" " * ((8 - len(hb) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
}

# 1. a base README.md over 16 MiB: its text is not carried, its front matter's license is,
# and the card and the summary say so
cp -r "$W/tiny" "$W/big-card"
python3 - "$W/big-card/README.md" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("---\nlicense: apache-2.0\npipeline_tag: text-generation\n---\n\n# Huge card\n\n")
    f.write(("filler line of a very long model card\n") * 460000)
PY
$FF quantize "$W/big-card" "$W/q-big" --no-doctor > "$W/q-big.out" 2>&1; rc=$?
card=$W/q-big/README.md
if [ $rc = 0 ] && grep -q '^license: apache-2.0' "$card" && grep -q '^pipeline_tag: text-generation' "$card" &&
   grep -q 'over the 16 MiB a base card is carried up to, so its text is not included here' "$card" &&
   ! grep -q 'filler line' "$card" && [ "$(stat -c %s "$card")" -lt 100000 ] &&
   grep -q "note: the input's README.md is .* bytes, over 16 MiB: the model card carries its front matter's keys" "$W/q-big.out"; then
    pass msg2_card_over_16mib "license carried, text left out, $(stat -c %s "$card")-byte card; $(grep -o 'note: the input.*MiB' "$W/q-big.out")"
else fail msg2_card_over_16mib "rc=$rc license=$(grep -c '^license:' "$card") comment=$(grep -c 'over the 16 MiB' "$card"): $(tail -2 "$W/q-big.out" | tr '\n' ' ')"; fi
# ... and one whose front matter does not close in its first 64 KiB carries no keys, and says so
python3 - "$W/big-card/README.md" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("---\nlicense: apache-2.0\n")
    f.write("# not closed\n" * 1400000)
PY
$FF quantize "$W/big-card" "$W/q-big2" --no-doctor > "$W/q-big2.out" 2>&1; rc=$?
card=$W/q-big2/README.md
if [ $rc = 0 ] && ! grep -q '^license:' "$card" && grep -q 'No front matter closes within its first 64 KiB, so none of its keys' "$card" &&
   grep -q "the model card carries neither its text nor its keys" "$W/q-big2.out"; then
    pass msg2_card_over_16mib_no_front_matter "no keys, said in the card and the summary"
else fail msg2_card_over_16mib_no_front_matter "rc=$rc $(grep -c 'No front matter closes' "$card")"; fi

# 2. a README.md holding a NUL: the text after it is carried, the NUL shown as U+FFFD
cp -r "$W/tiny" "$W/nul-card"
printf -- '---\nlicense: mit\n---\n\n# Card\n\nbefore the NUL\000after the NUL, the usage terms\n' > "$W/nul-card/README.md"
$FF quantize "$W/nul-card" "$W/q-nul" --no-doctor > "$W/q-nul.out" 2>&1; rc=$?
card=$W/q-nul/README.md
if [ $rc = 0 ] && grep -q 'after the NUL, the usage terms' "$card" && grep -q $'before the NUL\xef\xbf\xbdafter' "$card" &&
   grep -q 'it holds 1 NUL byte, shown as U+FFFD' "$card" && grep -q '^license: mit' "$card" &&
   [ "$(tr -cd '\000' < "$card" | wc -c)" = 0 ] && grep -q 'note: the input.s README.md holds 1 NUL byte' "$W/q-nul.out"; then
    pass msg2_card_nul "text after the NUL carried, U+FFFD in its place, said in the card and the summary"
else fail msg2_card_nul "rc=$rc after=$(grep -c 'after the NUL' "$card") comment=$(grep -c 'NUL byte' "$card")"; fi

# 3. an FP8-block scale of the wrong rank: every dimension printed
$FF_FAST synth --arch qwen3-moe --hidden 256 --intermediate 256 --moe-intermediate 128 --vocab 256 --head-dim 64 \
    --layers 1 --experts 2 --source fp8-block "$W/fp8" > /dev/null
header "$W/fp8/model.safetensors" 'k = "model.layers.0.self_attn.q_proj.weight_scale_inv"; h[k]["shape"] = h[k]["shape"] + [1]'
$FF plan "$W/fp8" > "$W/fp8.out" 2> "$W/fp8.err"; rc=$?
if [ $rc = 1 ] && grep -q 'weight_scale_inv is F32 \[2, 2, 1\], expected F32 \[2, 2\] for a \[256, 256\] weight' "$W/fp8.err"; then
    pass msg2_scale_rank "$(grep -o 'weight_scale_inv is .*weight' "$W/fp8.err")"
else fail msg2_scale_rank "rc=$rc $(cat "$W/fp8.err")"; fi
# ... and doctor's embedding-table shape the same way
$FF_FAST synth --vision-layers 0 "$W/g3d" > /dev/null
header "$W/g3d/model.safetensors" 'k = "model.language_model.embed_tokens.weight"; s = h[k]["shape"]; h[k]["shape"] = [s[0], s[1] // 2, 2]'
$FF doctor "$W/g3d" > "$W/g3d.out" 2>&1; rc=$?
if [ $rc = 4 ] && grep -q 'embed_tokens.weight is \[2048, 128, 2\] but config.json has vocab_size 2048, hidden_size 256' "$W/g3d.out"; then
    pass msg2_embed_rank "$(grep -o 'embed_tokens.weight is .*256' "$W/g3d.out")"
else fail msg2_embed_rank "rc=$rc $(grep -m1 SHAPE "$W/g3d.out")"; fi

# 4. names and paths that are not UTF-8 (or cut inside a character) keep their place in JSON:
# the reader refuses a tensor name that is not UTF-8 in one line naming the file ...
cp -r "$W/tiny" "$W/badname"
python3 - "$W/badname/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n].replace(b"self_attn.q_proj.weight", b"self_attn.q\xffproj.weight", 1)
open(p, "wb").write(b[:8] + h + b[8 + n:])
PY
$FF inspect "$W/badname" > /dev/null 2> "$W/badname.err"; rc=$?
if [ $rc = 1 ] && [ "$(wc -l < "$W/badname.err")" = 1 ] && grep -q "badname/model.safetensors: header: bad JSON at byte [0-9]*: unable to decode byte 0xff" "$W/badname.err"; then
    pass msg2_name_not_utf8_refused "$(cut -c1-120 "$W/badname.err" | sed "s|$W/||")"
else fail msg2_name_not_utf8_refused "rc=$rc $(cat "$W/badname.err")"; fi
# ... a verify item naming a long multibyte module is kept whole in --json and the page
# (a 1,200-byte buffer cut it inside a character, and jansson dropped the item) ...
$FF quantize "$W/tiny" "$W/q" --no-doctor --quiet > /dev/null 2>&1
cp -r "$W/q" "$W/q-mb"
header "$W/q-mb/model.safetensors" 'rename("model.layers.0.self_attn.o_proj", "model.layers.0.self_attn.x" + "é" * 700 + ".o_proj")'
$FF verify "$W/q-mb" --against "$W/tiny" --json --html "$W/q-mb.html" > "$W/q-mb.json" 2> "$W/q-mb.err"; rc=$?
got=$(python3 - "$W/q-mb.json" "$W/q-mb.html" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); page = open(sys.argv[2], encoding="utf-8").read()
mod = "model.layers.0.self_attn.x" + "é" * 700 + ".o_proj"
items = r["checks"]["coverage"]["items"]
whole = [i for i in items if mod + ".weight_" in i]
print(len(items), len(whole), page.count(mod + ".weight_"))
PY
)
if [ $rc = 6 ] && [ "$got" = "4 3 3" ]; then
    pass msg2_long_multibyte_item "4 coverage items, the 3 naming the 1,433-byte module whole in the JSON and the page"
else fail msg2_long_multibyte_item "rc=$rc items/whole/page: $got $(head -c 200 "$W/q-mb.err")"; fi
# ... and an output path that is not UTF-8 is kept, its byte as U+FFFD
cp -r "$W/q" "$W/q"$'\xff'
$FF verify "$W/q"$'\xff' --json > "$W/q-ff.json" 2>&1; rc=$?
out=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("output", "MISSING")[-2:])' "$W/q-ff.json" 2>&1)
if [ $rc = 0 ] && [ "$out" = $'q\xef\xbf\xbd' ]; then pass msg2_path_not_utf8 "output: ...q\\ufffd"
else fail msg2_path_not_utf8 "rc=$rc output=$out"; fi

# 5. a symbolic link loop in the Hugging Face cache is named as one, not "not in the cache"
HUB=$W/hub; commit=0123456789abcdef0123456789abcdef01234567
mkdir -p "$HUB/models--acme--loop/refs" "$HUB/models--acme--loop/snapshots" "$HUB/models--acme--loop/blobs"
echo $commit > "$HUB/models--acme--loop/refs/main"
ln -s $commit "$HUB/models--acme--loop/snapshots/$commit"
mkdir -p "$HUB/models--acme--loopref/refs" "$HUB/models--acme--loopref/snapshots" "$HUB/models--acme--loopref/blobs"
ln -s main "$HUB/models--acme--loopref/refs/main"
for repo in loop loopref; do
    (cd "$W" && HF_HUB_CACHE=$HUB $FF inspect acme/$repo > /dev/null 2> "$W/$repo.err"); rc=$?
    want=$HUB/models--acme--loop/snapshots/$commit; [ $repo = loopref ] && want=$HUB/models--acme--loopref/refs/main
    if [ $rc = 1 ] && [ "$(wc -l < "$W/$repo.err")" = 1 ] && grep -qF "acme/$repo: $want in the Hugging Face cache is a loop of symbolic links" "$W/$repo.err" &&
       ! grep -q 'not in the Hugging Face cache' "$W/$repo.err"; then
        pass "msg2_hf_cache_loop_$repo" "$(sed "s|$W/||" "$W/$repo.err" | cut -c1-150)"
    else fail "msg2_hf_cache_loop_$repo" "rc=$rc $(cat "$W/$repo.err")"; fi
done

# 6. quantization_config: null is none
cp -r "$W/tiny" "$W/qnull"
python3 - "$W/qnull/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["quantization_config"] = None; json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
$FF quantize "$W/qnull" "$W/q-null" --no-doctor --quiet > "$W/q-null.out" 2>&1; rc=$?
if [ $rc = 0 ] && python3 -c 'import json,sys; q = json.load(open(sys.argv[1]))["quantization_config"]; sys.exit(q["format"] != "nvfp4-pack-quantized")' "$W/q-null/config.json"; then
    pass msg2_qconfig_null "quantized, quantization_config written"
else fail msg2_qconfig_null "rc=$rc $(tail -1 "$W/q-null.out")"; fi

# 7. a 1,500-character module name in the source and the output verifies (a 1,024-byte
# buffer cut it, and its tensors were missing from the output and from no source)
cp -r "$W/tiny" "$W/long-src"; cp -r "$W/q" "$W/long-q"
long="model.layers.$(printf '0%.0s' $(seq 1 1470)).self_attn.o_proj"
for f in "$W/long-src" "$W/long-q"; do
    header "$f/model.safetensors" "rename('model.layers.0.self_attn.o_proj', '$long')"
done
$FF verify "$W/long-q" --against "$W/long-src" > "$W/long.out" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q 'ok   coverage .* 32 modules quantized, 0 extra' "$W/long.out" && grep -q 'ok   decode  *32 quantized' "$W/long.out"; then
    pass msg2_long_module_name "${#long}-character module: decode 32, coverage 0 extra"
else fail msg2_long_module_name "rc=$rc $(grep -m2 'FAIL' "$W/long.out" | cut -c1-120 | tr '\n' ' ')"; fi

# 8. header-only commands read headers only: a 300 MB shard under a 200 MB address-space
# limit (the release binary: ASan reserves terabytes of address space)
$FF_FAST synth --layers 1 --vision-layers 0 --vocab 32768 --hidden 2048 --intermediate 12288 "$W/big" > /dev/null
size=$(stat -c %s "$W/big/model.safetensors")
for cmd in inspect plan fit doctor diff; do
    args=("$W/big"); [ $cmd = diff ] && args=("$W/big" "$W/big")
    (ulimit -v 200000; $FF_FAST $cmd "${args[@]}" > "$W/big-$cmd.out" 2>&1); rc=$?
    if [ $rc = 0 ] && [ "$size" -gt 204800000 ]; then pass "msg2_ulimit_$cmd" "$((size / 1000000)) MB shard, ulimit -v 200000"
    else fail "msg2_ulimit_$cmd" "rc=$rc size=$size $(tail -1 "$W/big-$cmd.out")"; fi
done
rm -rf "$W/big" "$W/big-card" "$W/q-big" "$W/q-big2"
exit $GOLDEN_RC

#!/usr/bin/env bash
# Golden tests for `fp4forge doctor`: one fixture per finding, made here from
# the real tiny Gemma-4 checkpoint; each is detected with its code, fixed
# (or refused, where no fix can be proven), re-checked clean from disk, and
# every backup compared byte for byte with the original it saved.
# Leaves fixed fixtures in $WORK/doctor/*.fixed for the conformance tier.
set -u
FF=${FF:-build/fp4forge-san}
WORK=${WORK:-build/golden-work}
TAR=${FIXTURES:-/work/shared/fixtures}/gemma4-tiny-dense.tar.gz
D=$WORK/doctor
rm -rf "$D"; mkdir -p "$D"
ok() { echo "PASS doctor_$1"; }
no() { echo "FAIL doctor_$1${2:+ ($2)}"; }
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then ok "$name"; else no "$name"; fi; }
[ -f "$TAR" ] || { echo "SKIP doctor_all (no $TAR)"; exit 0; }

# JSON edits and safetensors rewrites with the standard library only.
py() { python3 - "$@"; }
jset() {  # jset FILE PYTHON-STATEMENT (j is the document)
    py "$1" "$2" <<'EOF'
import json, sys
p, stmt = sys.argv[1], sys.argv[2]
j = json.load(open(p))
exec(stmt)
json.dump(j, open(p, "w"), indent=2)
EOF
}
streshape() {  # streshape DIR NAME=d0,d1 ...  (zero data; renames with NAME=>NEW)
    py "$@" <<'EOF'
import json, struct, sys, os
d = sys.argv[1]; p = os.path.join(d, "model.safetensors")
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
ops = dict(a.split("=", 1) for a in sys.argv[2:])
meta = h.pop("__metadata__", None); out = {}; blobs = []; off = 0
for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
    if k in ops and ops[k].startswith(">"):
        k = ops[k][1:]
    elif k in ops:
        v["shape"] = [int(x) for x in ops[k].split(",")]
        n2 = 2
        for s in v["shape"]: n2 *= s
        raw = bytes(n2)
    v["data_offsets"] = [off, off + len(raw)]; off += len(raw)
    out[k] = v; blobs.append(raw)
if meta is not None: out["__metadata__"] = meta
hb = json.dumps(out).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
EOF
}

# base: the real checkpoint plus the aux files a served multimodal model needs
mkdir -p "$D/src" && tar xzf "$TAR" -C "$D/src"
BASE=$D/base
cp -r "$D/src/gemma4-tiny-dense" "$BASE"; rm -f "$BASE/ref_logits.pt"
echo '{"processor_class": "Gemma4Processor"}' > "$BASE/processor_config.json"
echo '{"image_processor_type": "Gemma4ImageProcessor"}' > "$BASE/preprocessor_config.json"
echo '{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}' > "$BASE/chat_template.jinja"
echo '{"version": "1.0", "truncation": null, "padding": null, "model": {"type": "BPE"}}' > "$BASE/tokenizer.json"
echo '{"model_max_length": 131072, "tokenizer_class": "GemmaTokenizer"}' > "$BASE/tokenizer_config.json"
CANON=$D/canonical; cp -r "$BASE" "$CANON"

check base_clean "$FF" doctor "$BASE"
check real_tensors_pass_shapes sh -c "\"$FF\" doctor --json \"$D/src/gemma4-tiny-dense\" | grep -qv SHAPE_"

mk() { rm -rf "$D/$1"; cp -r "$BASE" "$D/$1"; cp -r "$BASE" "$D/$1.orig"; }
# detect CASE CODE: doctor exits 4 and names CODE
detect() {
    local out; out=$("$FF" doctor "$D/$1" 2>&1); local rc=$?
    if [ $rc -eq 4 ] && grep -q "^$2 " <<<"$out"; then ok "$1_detect_$2"; else no "$1_detect_$2" "rc $rc"; echo "$out" | head -5; fi
}
# fixit CASE [ARGS]: --fix exits 0, re-check from disk is clean, backups == originals
fixit() {
    local c=$1; shift
    cp -r "$D/$c" "$D/$c.before"
    local out; out=$("$FF" doctor "$D/$c" --fix "$@" 2>&1); local rc=$?
    if [ $rc -eq 0 ]; then ok "${c}_fix"; else no "${c}_fix" "rc $rc"; echo "$out" | head -8; fi
    check "${c}_recheck_clean" "$FF" doctor "$D/$c" "$@"
    local nb=0 bad=0
    for b in "$D/$c"/*.bak-fp4forge-*; do
        [ -f "$b" ] || continue; nb=$((nb + 1))
        local orig; orig=$(basename "$b" | sed 's/\.bak-fp4forge-[0-9]\{8\}-[0-9]\{6\}.*//')
        cmp -s "$b" "$D/$c.before/$orig" || bad=1
    done
    if [ "$nb" -gt 0 ] && [ $bad -eq 0 ]; then ok "${c}_backups_identical"; else
        [ "$nb" -eq 0 ] && [ "${NOBACKUP:-0}" = 1 ] && ok "${c}_no_file_changed" || no "${c}_backups_identical" "$nb backups"; fi
    rm -rf "$D/$c.before"; cp -r "$D/$c" "$D/$c.fixed"
}

# 1. k_eq_v without the full-attention globals (legacy schema, none stated)
mk keqv; jset "$D/keqv/config.json" 'del j["text_config"]["per_layer_config"]'
detect keqv G4_KEQV_GLOBALS_MISSING
fixit keqv
check keqv_derived_32x1 py "$D/keqv/config.json" <<'EOF'
import json, sys; t = json.load(open(sys.argv[1]))["text_config"]
sys.exit(not (t["global_head_dim"] == 32 and t["num_global_key_value_heads"] == 1))
EOF
# ... and refused when the shapes cannot prove one answer (no q/k norms, no q/o_proj)
mk keqv_ambig; jset "$D/keqv_ambig/config.json" 'del j["text_config"]["per_layer_config"]'
args=(); for l in 5 11; do for t in q_proj.weight q_norm.weight k_norm.weight o_proj.weight; do
    args+=("model.language_model.layers.$l.self_attn.$t=>x.$l.$t"); done; done
streshape "$D/keqv_ambig" "${args[@]}"
out=$("$FF" doctor "$D/keqv_ambig" --fix 2>&1); rc=$?
if [ $rc -eq 4 ] && grep -q "more than one answer" <<<"$out"; then ok keqv_ambiguous_refused; else no keqv_ambiguous_refused "rc $rc"; fi

# 2. schema drift: per_layer_config next to the flat globals; both directions
mk drift; jset "$D/drift/config.json" 't=j["text_config"]; t["global_head_dim"]=32; t["num_global_key_value_heads"]=1'
detect drift SCHEMA_PER_LAYER_DRIFT
fixit drift --schema legacy
check drift_now_legacy py "$D/drift/config.json" <<'EOF'
import json, sys; t = json.load(open(sys.argv[1]))["text_config"]
sys.exit(not ("per_layer_config" not in t and t["global_head_dim"] == 32))
EOF
mk topl; cp "$D/drift/config.json" "$D/topl/config.json"
detect_req() { local out; out=$("$FF" doctor "$D/topl" --schema per-layer 2>&1); [ $? -eq 4 ] && grep -q SCHEMA_PER_LAYER_DRIFT <<<"$out"; }
check topl_detect_SCHEMA_PER_LAYER_DRIFT detect_req
fixit topl --schema per-layer
check topl_map_rebuilt py "$D/topl/config.json" <<'EOF'
import json, sys; t = json.load(open(sys.argv[1]))["text_config"]
sys.exit(not (t["per_layer_config"] == {"05": {"head_dim": 32, "num_key_value_heads": 1},
              "11": {"head_dim": 32, "num_key_value_heads": 1}} and "global_head_dim" not in t))
EOF
# redundancy proof failure: layer 11 really has head_dim 64 (its tensors too)
mk hetero; jset "$D/hetero/config.json" 'j["text_config"]["per_layer_config"]["11"]["head_dim"]=64'
P=model.language_model.layers.11.self_attn
streshape "$D/hetero" $P.q_proj.weight=256,64 $P.q_norm.weight=64 $P.k_norm.weight=64 \
    $P.k_proj.weight=64,64 $P.o_proj.weight=64,256
check hetero_clean_as_is "$FF" doctor "$D/hetero"
cp -r "$D/hetero" "$D/hetero.fixed"
cp "$D/hetero/config.json" "$D/hetero.cfg"
out=$("$FF" doctor "$D/hetero" --fix --schema legacy 2>&1); rc=$?
if [ $rc -eq 4 ] && grep -q "layer 11 differs" <<<"$out"; then ok hetero_legacy_refused_layer_11; else no hetero_legacy_refused_layer_11 "rc $rc"; echo "$out"; fi
check hetero_config_untouched cmp -s "$D/hetero/config.json" "$D/hetero.cfg"

# 3. stale / conflicting keys
mk keys; jset "$D/keys/config.json" 'j["torch_dtype"]="float32"; t=j["text_config"]; t.pop("enable_moe_block"); t["enable_moe"]=False'
detect keys CONFIG_CONFLICTING_KEYS
detect keys CONFIG_STALE_KEY
fixit keys

# 4. missing aux files, copied from a same-family canonical folder
mk aux; rm "$D/aux/processor_config.json" "$D/aux/preprocessor_config.json" "$D/aux/chat_template.jinja"
detect aux AUX_PROCESSOR_MISSING
detect aux AUX_PREPROCESSOR_MISSING
detect aux AUX_CHAT_TEMPLATE_MISSING
OTHER=$D/other; cp -r "$CANON" "$OTHER"; jset "$OTHER/config.json" 'j["text_config"]["vocab_size"]=999'
out=$("$FF" doctor "$D/aux" --fix --aux-from "$OTHER" 2>&1); rc=$?
if [ $rc -eq 4 ] && grep -q "vocab_size" <<<"$out" && [ ! -f "$D/aux/processor_config.json" ]; then ok aux_other_family_refused; else no aux_other_family_refused "rc $rc"; fi
NOBACKUP=1 fixit aux --aux-from "$CANON"
check aux_copied_identical cmp -s "$D/aux/processor_config.json" "$CANON/processor_config.json"

# 5. tokenizer truncation / padding / model_max_length baked in
mk tok
jset "$D/tok/tokenizer.json" 'j["truncation"]={"direction":"Right","max_length":512,"strategy":"LongestFirst","stride":0}; j["padding"]={"strategy":{"Fixed":512},"direction":"Right","pad_id":0,"pad_token":"<pad>"}'
jset "$D/tok/tokenizer_config.json" 'j["model_max_length"]=2048'
detect tok TOKENIZER_TRUNCATION
detect tok TOKENIZER_PADDING
detect tok TOKENIZER_MAX_LENGTH
out=$("$FF" doctor "$D/tok" --fix --json 2>&1)
if grep -q 'max_length\\":512' <<<"$out" && grep -q "the cap was 2048" <<<"$out"; then ok tok_fix_names_the_cap; else no tok_fix_names_the_cap; fi
cp "$D/tok.orig/tokenizer.json" "$D/tok/"; cp "$D/tok.orig/tokenizer_config.json" "$D/tok/"; rm -f "$D/tok"/*.bak-*
jset "$D/tok/tokenizer.json" 'j["truncation"]={"max_length":512,"strategy":"LongestFirst"}'
jset "$D/tok/tokenizer_config.json" 'j["model_max_length"]=2048'
fixit tok

# 6. config vs tensors: a malformed upload is caught and not "fixed"
mk shape; streshape "$D/shape" model.language_model.layers.3.mlp.gate_proj.weight=64,128 \
    model.language_model.layers.5.self_attn.k_proj.weight=64,64
detect shape SHAPE_MISMATCH
out=$("$FF" doctor "$D/shape" --json 2>&1)
if grep -q "layers.5.self_attn.k_proj.weight is \[64, 64\] but config.json implies \[32, 64\]" <<<"$out"; then ok shape_names_tensor; else no shape_names_tensor; fi
"$FF" doctor "$D/shape" --fix >/dev/null 2>&1; rc=$?
[ $rc -eq 4 ] && ! ls "$D/shape"/*.bak-* >/dev/null 2>&1 && ok shape_fix_refused_nothing_written || no shape_fix_refused_nothing_written "rc $rc"
mk extra; jset "$D/extra/config.json" 't=j["text_config"]; t["num_hidden_layers"]=11; t["layer_types"]=t["layer_types"][:11]; t["per_layer_config"].pop("11")'
detect extra SHAPE_EXTRA_LAYER

# bad input and usage
"$FF" doctor "$D/nonexistent" >/dev/null 2>&1; [ $? -eq 1 ] && ok bad_input_exit_1 || no bad_input_exit_1
"$FF" doctor "$BASE" --schema sideways >/dev/null 2>&1; [ $? -eq 2 ] && ok bad_schema_exit_2 || no bad_schema_exit_2
# a finding whose message is cut at its buffer inside a UTF-8 character stays in --json
"$FF" synth "$D/utf8" > /dev/null
python3 - "$D/utf8/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"]["top_k"] = "a" + "\u00e9" * 300
json.dump(c, open(sys.argv[1], "w"), ensure_ascii=False)
PY
"$FF" doctor "$D/utf8" --json > "$D/utf8.json" 2> /dev/null
if python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if not j["clean"] and [f["code"] for f in j["findings"]] == ["CONFIG_STALE_KEY"] else 1)' "$D/utf8.json"; then
    ok json_keeps_finding_cut_mid_utf8
else no json_keeps_finding_cut_mid_utf8 "$(head -c 200 "$D/utf8.json")"; fi
exit 0

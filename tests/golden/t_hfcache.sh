#!/usr/bin/env bash
# Hugging Face cache names as inputs: a fake hub cache laid out as
# huggingface_hub lays it out (refs/<revision> holding a commit, snapshots/
# <commit>/ of symlinks into blobs/), names resolved by every reading
# command, revisions by ref and by commit, a missing model in one line, the
# variables' precedence, and the cache left byte-identical.
set -u
. "$(dirname "$0")/lib.sh"
WORK=$(realpath -m "$WORK"); W=$WORK/hfcache; rm -rf "$W"; mkdir -p "$W"  # absolute: the test cd-s
FF=$(realpath "$FF"); FF_FAST=$(realpath "$FF_FAST")
# the test decides where the cache is; nothing from the caller's environment
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HOME XDG_CACHE_HOME

G="--hidden 64 --intermediate 64 --vocab 256 --head-dim 16 --global-head-dim 32 --vision-layers 0"
$FF_FAST synth $G --layers 6 "$W/src-a" > /dev/null && $FF_FAST synth $G --layers 12 "$W/src-b" > /dev/null
printf -- '---\nlicense: apache-2.0\n---\n\n# Tiny Gemma\n\nThe base card of acme/tiny-gemma.\n' > "$W/src-a/README.md"

# cache ROOT REPO REF SRC_DIR: adds SRC_DIR to the cache as huggingface_hub
# would (blobs named by content hash, snapshot files linked relatively) under
# the commit of its content, points refs/REF at it and prints the commit
GOLDEN_DIR=$(cd "$(dirname "$0")" && pwd)
cache() { python3 "$GOLDEN_DIR/fake_cache.py" "$@"; }
HUB=$W/hub
A=$(cache "$HUB" acme/tiny-gemma main "$W/src-a") && B=$(cache "$HUB" acme/tiny-gemma v2 "$W/src-b")
SNAP_A=$HUB/models--acme--tiny-gemma/snapshots/$A
if [ -L "$SNAP_A/model.safetensors" ] && [ "$(cat "$HUB/models--acme--tiny-gemma/refs/main")" = "$A" ]; then
    pass hf_fake_cache "main -> ${A:0:8}, v2 -> ${B:0:8}"; else fail hf_fake_cache; fi

# state DIR: every file's sha256 (links followed) and the `find -ls` listing
# (inodes, modes, sizes, mtimes, link targets), for "left byte-identical"
state() { (cd "$1" && find . -type f -exec sha256sum {} + | sort && find . -ls | awk '{$1=""; print}' | sort); }
# untouched NAME: the cache is as it was when $before was taken
untouched() {
    local after; after=$(state "$HUB")
    if [ "$before" = "$after" ]; then pass "$1" "$(echo "$after" | grep -c '^[0-9a-f]\{64\} ') files, sha256 + find -ls identical"
    else fail "$1" "$(diff <(echo "$before") <(echo "$after") | head -5 | tr '\n' ' ')"; fi
}
export HF_HUB_CACHE=$HUB
mkdir -p "$W/run"; cd "$W/run" || exit 1
before=$(state "$HUB")
# plan / inspect / quantize by name; quantize's OUT defaults to ./<name>-NVFP4A16
$FF plan --json acme/tiny-gemma > "$W/plan-main.json"; prc=$?
if [ $prc = 0 ] && python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["layers"] == 6 and j["checkpoint"] == sys.argv[2], j["checkpoint"]' \
    "$W/plan-main.json" "$SNAP_A"; then pass hf_plan_by_name "layers 6 from snapshots/${A:0:8}"; else fail hf_plan_by_name "rc=$prc"; fi
expect_rc hf_inspect_by_name 0 $FF inspect acme/tiny-gemma
grep -q "gemma4 dense, 6 layers" "$WORK/hf_inspect_by_name.out" || fail hf_inspect_by_name_table
expect_rc hf_quantize_by_name 0 $FF quantize --quiet acme/tiny-gemma
if grep -q '"quant_method": "compressed-tensors"' "$W/run/tiny-gemma-NVFP4A16/config.json" 2>/dev/null &&
   grep -q '^base_model: acme/tiny-gemma$' "$W/run/tiny-gemma-NVFP4A16/README.md" &&
   grep -q "^vllm serve ./tiny-gemma-NVFP4A16$" "$W/run/tiny-gemma-NVFP4A16/README.md"; then
    pass hf_quantize_default_out "./tiny-gemma-NVFP4A16, card base_model acme/tiny-gemma"
else fail hf_quantize_default_out; fi
for f in config.json model.safetensors README.md; do
    [ -L "$W/run/tiny-gemma-NVFP4A16/$f" ] && fail "hf_output_no_links" "$f is a link"
done
expect_rc hf_verify_against_name 0 $FF verify tiny-gemma-NVFP4A16 --against acme/tiny-gemma
expect_rc hf_fit_by_name 0 $FF fit acme/tiny-gemma
expect_rc hf_doctor_by_name 0 $FF doctor acme/tiny-gemma
expect_rc hf_diff_two_revisions 5 $FF diff acme/tiny-gemma acme/tiny-gemma@v2
expect_rc hf_diff_same_name 0 $FF diff acme/tiny-gemma "acme/tiny-gemma@$A"
untouched hf_cache_untouched_by_reads
# a quantized checkpoint in the cache too: dequantize by name
cache "$HUB" acme/tiny-gemma-NVFP4A16 main "$W/run/tiny-gemma-NVFP4A16" > /dev/null
before=$(state "$HUB")
expect_rc hf_dequantize_by_name 0 $FF dequantize acme/tiny-gemma-NVFP4A16 "$W/deq"

# revisions: a ref name, and a commit that names the snapshot directly
layers() { $FF plan --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"])'; }
got="$(layers acme/tiny-gemma@v2) $(layers "acme/tiny-gemma@$B") $(layers "acme/tiny-gemma@$A")"
if [ "$got" = "12 12 6" ]; then pass hf_revisions "@v2, @${B:0:8}, @${A:0:8} -> layers $got"; else fail hf_revisions "got $got"; fi
expect_rc hf_quantize_revision 0 $FF quantize --quiet acme/tiny-gemma@v2 "$W/q-v2"
grep -q "^base_model: acme/tiny-gemma$" "$W/q-v2/README.md" || fail hf_quantize_revision_card

# a missing model, revision or snapshot: one line naming where it looked and
# how to download it, exit 1
one_line() {  # NAME WANT_TEXT... : the last run printed exactly one line containing each
    local name=$1 out=$WORK/$1.out; shift
    [ "$(wc -l < "$out")" = 1 ] || { fail "${name}_one_line" "$(wc -l < "$out") lines"; return; }
    for t in "$@"; do grep -qF -- "$t" "$out" || { fail "${name}_text" "no '$t' in: $(cat "$out")"; return; }; done
}
expect_rc hf_missing_model 1 $FF plan acme/nope
one_line hf_missing_model "$HUB/models--acme--nope" "huggingface-cli download acme/nope" "hf download acme/nope"
expect_rc hf_missing_quantize 1 $FF quantize acme/nope
one_line hf_missing_quantize "$HUB/models--acme--nope"
[ ! -e "$W/run/nope-NVFP4A16" ] || fail hf_missing_quantize_wrote
expect_rc hf_missing_revision 1 $FF inspect acme/tiny-gemma@nobranch
one_line hf_missing_revision "$HUB/models--acme--tiny-gemma/refs/nobranch" "--revision nobranch"
expect_rc hf_missing_commit 1 $FF plan "acme/tiny-gemma@$(printf '%040d' 0)"
one_line hf_missing_commit "snapshots/$(printf '%040d' 0)"
expect_rc hf_missing_against 1 $FF verify tiny-gemma-NVFP4A16 --against acme/nope
one_line hf_missing_against "models--acme--nope"

# an existing path always wins over a cache name
mkdir -p "$W/run/acme" && cp -r "$W/src-b" "$W/run/acme/tiny-gemma"
[ "$(layers acme/tiny-gemma)" = 12 ] && pass hf_existing_path_wins || fail hf_existing_path_wins
rm -rf "$W/run/acme"

# precedence: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub
mkdir -p "$W/home1" "$W/home2/.cache/huggingface" "$W/empty-hub"
ln -s "$HUB" "$W/home1/hub"; ln -s "$HUB" "$W/home2/.cache/huggingface/hub"
HF_HUB_CACHE=$W/empty-hub HF_HOME=$W/home1 $FF plan acme/tiny-gemma > "$W/prec1.out" 2>&1; r1=$?
env -u HF_HUB_CACHE HF_HOME="$W/home1" $FF plan acme/tiny-gemma > /dev/null 2>&1; r2=$?
env -u HF_HUB_CACHE HF_HOME="$W/empty-home" HOME="$W/home2" $FF plan acme/tiny-gemma > "$W/prec3.out" 2>&1; r3=$?
env -u HF_HUB_CACHE HOME="$W/home2" $FF plan acme/tiny-gemma > /dev/null 2>&1; r4=$?
if [ "$r1$r2$r3$r4" = 1010 ] && grep -qF "$W/empty-hub/models--acme--tiny-gemma" "$W/prec1.out" &&
   grep -qF "$W/empty-home/hub/models--acme--tiny-gemma" "$W/prec3.out"; then
    pass hf_env_precedence "HF_HUB_CACHE > HF_HOME/hub > HOME/.cache/huggingface/hub"
else fail hf_env_precedence "rc $r1$r2$r3$r4"; fi

# doctor --fix never writes into the cache, by name or by snapshot path
expect_rc hf_doctor_fix_refused 2 $FF doctor --fix acme/tiny-gemma
grep -q "never writes" "$WORK/hf_doctor_fix_refused.out" || fail hf_doctor_fix_refused_text
expect_rc hf_doctor_fix_path_refused 2 $FF doctor --fix "$SNAP_A"
# quantize --fix works on a shadow beside OUT: a cache snapshot with a
# finding (tokenizer truncation baked in) is fixed there, not in the cache
cp -r "$W/src-a" "$W/src-c"
python3 - "$W/src-c/tokenizer.json" <<'PY'
import json, sys
json.dump({"version": "1.0", "truncation": {"max_length": 128, "strategy": "LongestFirst", "stride": 0, "direction": "Right"},
           "padding": None, "model": {"type": "BPE", "vocab": {}, "merges": []}}, open(sys.argv[1], "w"))
PY
untouched hf_cache_untouched_by_names
C=$(cache "$HUB" acme/tiny-gemma drift "$W/src-c")
before=$(state "$HUB")
expect_rc hf_doctor_finds_in_cache 4 $FF doctor acme/tiny-gemma@drift
expect_rc hf_quantize_fix_from_cache 0 $FF quantize --quiet --fix acme/tiny-gemma@drift "$W/q-fixed"
if python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["truncation"] is None' "$W/q-fixed/tokenizer.json" &&
   ! ls "$HUB"/models--acme--tiny-gemma/snapshots/$C/*.bak-* > /dev/null 2>&1; then
    pass hf_quantize_fix_shadow "fixed in the output, not the cache"; else fail hf_quantize_fix_shadow; fi

untouched hf_cache_untouched_by_fix
exit $GOLDEN_RC

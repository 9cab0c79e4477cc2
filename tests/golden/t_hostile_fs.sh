#!/usr/bin/env bash
# Hostile file systems (issue 35, H3 H12 H13 H14): FIFOs where files are
# read, a Hugging Face cache whose repo or snapshot folder is a link to
# somewhere else, a report path inside the checkpoint it reports on, and
# links that leave the input folder. Each is one line and a non-zero exit,
# nothing written at OUT (nor into the cache); `timeout 20` turns a hang
# into a failure.
set -u
. "$(dirname "$0")/lib.sh"
WORK=$(realpath -m "$WORK"); W=$WORK/hostile; rm -rf "$W"; mkdir -p "$W"  # absolute: the test cd-s
FF=$(realpath "$FF"); FF_FAST=$(realpath "$FF_FAST")
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HOME XDG_CACHE_HOME
T="timeout 20"

$FF_FAST synth "$W/small" > /dev/null || { fail hostile_synth; exit 1; }
$FF_FAST quantize "$W/small" "$W/q" --quiet > /dev/null || { fail hostile_quantize_reference; exit 1; }

# refused NAME RC OUT TEXT... : the last expect_rc printed one line holding
# each TEXT, and nothing is at OUT (nor a staging or shadow folder beside it)
refused() {
    local name=$1 out=$2 f=$WORK/$1.out; shift 2
    [ "$(wc -l < "$f")" = 1 ] || { fail "${name}_one_line" "$(wc -l < "$f") lines: $(head -3 "$f" | tr '\n' ' ')"; return; }
    for t in "$@"; do grep -qF -- "$t" "$f" || { fail "${name}_text" "no '$t' in: $(cat "$f")"; return; }; done
    [ -z "$out" ] && return
    local left; left=$(ls -d "$out" "$out".partial-* "$out".doctor-* 2> /dev/null | tr '\n' ' ')
    [ -z "$left" ] || fail "${name}_wrote" "left: $left"
}
# copy SRC DST: a fresh copy of a checkpoint folder to spoil
copy() { rm -rf "$2"; cp -r "$1" "$2"; }

# --- H3: FIFOs are never opened in a way that blocks ------------------------
copy "$W/small" "$W/f-readme"; rm -f "$W/f-readme/README.md"; mkfifo "$W/f-readme/README.md"
expect_rc hostile_fifo_readme_quantize 1 $T $FF quantize --quiet "$W/f-readme" "$W/o-readme"
refused hostile_fifo_readme_quantize "$W/o-readme" "f-readme/README.md" "a FIFO, not a regular file"
expect_rc hostile_fifo_readme_no_doctor 1 $T $FF quantize --quiet --no-doctor "$W/f-readme" "$W/o-readme"
refused hostile_fifo_readme_no_doctor "$W/o-readme" "f-readme/README.md" "a FIFO"
expect_rc hostile_fifo_readme_dry_run 1 $T $FF quantize --dry-run "$W/f-readme" "$W/o-readme"
grep -qF "f-readme/README.md: a FIFO" "$WORK/hostile_fifo_readme_dry_run.out" || fail hostile_fifo_readme_dry_run_text

copy "$W/small" "$W/f-config"; rm "$W/f-config/config.json"; mkfifo "$W/f-config/config.json"
for cmd in inspect plan doctor fit; do
    expect_rc "hostile_fifo_config_$cmd" 1 $T $FF $cmd "$W/f-config"
    refused "hostile_fifo_config_$cmd" "" "f-config/config.json: a FIFO, not a regular file"
done
expect_rc hostile_fifo_config_quantize 1 $T $FF quantize --quiet "$W/f-config" "$W/o-config"
refused hostile_fifo_config_quantize "$W/o-config" "f-config/config.json: a FIFO"

# another JSON file doctor reads, and a file only copied into OUT
copy "$W/small" "$W/f-tokcfg"; rm -f "$W/f-tokcfg/tokenizer_config.json"; mkfifo "$W/f-tokcfg/tokenizer_config.json"
expect_rc hostile_fifo_tokenizer_config_doctor 1 $T $FF doctor "$W/f-tokcfg"
refused hostile_fifo_tokenizer_config_doctor "" "tokenizer_config.json: a FIFO"
expect_rc hostile_fifo_tokenizer_config_quantize 1 $T $FF quantize --quiet "$W/f-tokcfg" "$W/o-tokcfg"
refused hostile_fifo_tokenizer_config_quantize "$W/o-tokcfg" "tokenizer_config.json: a FIFO"
copy "$W/small" "$W/f-aux"; mkfifo "$W/f-aux/notes.txt"
expect_rc hostile_fifo_aux_quantize 1 $T $FF quantize --quiet --no-doctor "$W/f-aux" "$W/o-aux"
refused hostile_fifo_aux_quantize "$W/o-aux" "f-aux/notes.txt: a FIFO"
copy "$W/q" "$W/f-qaux"; mkfifo "$W/f-qaux/notes.txt"
expect_rc hostile_fifo_aux_dequantize 1 $T $FF dequantize "$W/f-qaux" "$W/o-deq"
refused hostile_fifo_aux_dequantize "$W/o-deq" "f-qaux/notes.txt: a FIFO"
expect_rc hostile_fifo_aux_repair_scales 1 $T $FF repair-scales "$W/f-qaux" "$W/o-rep"
refused hostile_fifo_aux_repair_scales "$W/o-rep" "f-qaux/notes.txt: a FIFO"

# a shard the index names that is a FIFO
copy "$W/small" "$W/f-shard"; mv "$W/f-shard/model.safetensors" "$W/f-shard/a.safetensors"
mkfifo "$W/f-shard/b.safetensors"
python3 - "$W/f-shard" <<'PY'
import json, struct, sys
d = sys.argv[1]
b = open(d + "/a.safetensors", "rb").read(); h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
wm = {k: "a.safetensors" for k in h if k != "__metadata__"}; wm["extra.weight"] = "b.safetensors"
json.dump({"metadata": {}, "weight_map": wm}, open(d + "/model.safetensors.index.json", "w"))
PY
expect_rc hostile_fifo_shard_inspect 1 $T $FF inspect "$W/f-shard"
refused hostile_fifo_shard_inspect "" "b.safetensors: a FIFO"

# refs/main of a cache repo: resolving the name must not block
cache() { python3 "$(dirname "$0")/fake_cache.py" "$@"; }  # ROOT REPO REF SRC; prints the commit
HUB=$W/hub; export HF_HUB_CACHE=$HUB
cache "$HUB" acme/fifo-ref main "$W/small" > /dev/null
rm "$HUB/models--acme--fifo-ref/refs/main"; mkfifo "$HUB/models--acme--fifo-ref/refs/main"
expect_rc hostile_fifo_refs_main 1 $T $FF plan acme/fifo-ref
refused hostile_fifo_refs_main "" "models--acme--fifo-ref/refs/main: a FIFO, not a regular file"

# --- H12: doctor --fix never writes into the cache, whatever links it -----
# a finding doctor --fix would repair: tokenizer truncation baked in
copy "$W/small" "$W/src-tok"
python3 - "$W/src-tok/tokenizer.json" <<'PY'
import json, sys
json.dump({"version": "1.0", "truncation": {"max_length": 128, "strategy": "LongestFirst", "stride": 0, "direction": "Right"},
           "padding": None, "model": {"type": "BPE", "vocab": {}, "merges": []}}, open(sys.argv[1], "w"))
PY
state() { (cd "$1" && find -L . -type f -exec sha256sum {} + | sort && find -L . -ls | awk '{$1=""; print}' | sort); }
# the repo folder is a link: models--acme--linked -> elsewhere/repo
mkdir -p "$W/elsewhere"
C=$(cache "$W/elsewhere" acme/linked main "$W/src-tok")
mv "$W/elsewhere/models--acme--linked" "$W/elsewhere/repo"; ln -s "$W/elsewhere/repo" "$HUB/models--acme--linked"
# the snapshot folder is a link: snapshots/<C> -> elsewhere/snap (blobs stay in the repo)
cache "$HUB" acme/snaplinked main "$W/src-tok" > /dev/null
S=$HUB/models--acme--snaplinked/snapshots/$C
mkdir -p "$W/elsewhere/snap"; for f in "$S"/*; do ln -s "$(realpath "$f")" "$W/elsewhere/snap/${f##*/}"; done
rm -rf "$S"; ln -s "$W/elsewhere/snap" "$S"
expect_rc hostile_cache_linked_doctor_finds 4 $T $FF doctor acme/linked
before=$(state "$W/elsewhere"; state "$HUB")
for arg in acme/linked acme/snaplinked "$HUB/models--acme--linked/snapshots/$C" "$W/elsewhere/repo/snapshots/$C" "$S"; do
    n=hostile_cache_doctor_fix_$(echo "$arg" | sed "s|$W/||; s|[^A-Za-z0-9]|_|g" | cut -c1-40)
    expect_rc "$n" 2 $T $FF doctor --fix "$arg"
    refused "$n" "" "which fp4forge never writes"
done
after=$(state "$W/elsewhere"; state "$HUB")
if [ "$before" = "$after" ] && ! find -L "$W/elsewhere" "$HUB" -name '*.bak-fp4forge-*' | grep -q .; then
    pass hostile_cache_doctor_fix_untouched "sha256 + find -ls of the cache and its linked folders identical, no backup"
else fail hostile_cache_doctor_fix_untouched "$(diff <(echo "$before") <(echo "$after") | head -4 | tr '\n' ' ')"; fi
# quantize --fix still works from the linked cache (a shadow beside OUT)
expect_rc hostile_cache_linked_quantize_fix 0 $T $FF quantize --quiet --fix acme/linked "$W/o-linked"
[ "$before" = "$(state "$W/elsewhere"; state "$HUB")" ] || fail hostile_cache_linked_quantize_fix_untouched

# --- H13: a report never lands inside a checkpoint folder that is read -----
copy "$W/q" "$W/q2"; sum=$(sha256sum < "$W/q2/model.safetensors")
expect_rc hostile_html_over_weights 2 $T $FF verify "$W/q2" --html "$W/q2/model.safetensors"
refused hostile_html_over_weights "" "--html $W/q2/model.safetensors: inside $W/q2"
[ "$(sha256sum < "$W/q2/model.safetensors")" = "$sum" ] || fail hostile_html_over_weights_bytes
expect_rc hostile_html_new_file_inside 2 $T $FF verify "$W/q2" --html "$W/q2/report.html"
[ ! -e "$W/q2/report.html" ] || fail hostile_html_new_file_inside_wrote
expect_rc hostile_html_inside_against 2 $T $FF verify "$W/q2" --against "$W/small" --html "$W/small/r.html"
refused hostile_html_inside_against "" "inside $W/small"
ln -s "$W/q2/model.safetensors" "$W/rep-link.html"; ln -s "$W/q2" "$W/q2-link"
expect_rc hostile_html_link_to_weights 2 $T $FF verify "$W/q2" --html "$W/rep-link.html"
expect_rc hostile_html_through_linked_folder 2 $T $FF verify "$W/q2" --html "$W/q2-link/config.json"
expect_rc hostile_diff_html_inside 2 $T $FF diff "$W/q" "$W/q2" --html "$W/q2/config.json"
refused hostile_diff_html_inside "" "inside $W/q2"
[ "$(sha256sum < "$W/q2/model.safetensors")" = "$sum" ] && cmp -s "$W/q/config.json" "$W/q2/config.json" ||
    fail hostile_html_checkpoint_unchanged
expect_rc hostile_html_outside_ok 0 $T $FF verify "$W/q2" --html "$W/verify.html"
[ -s "$W/verify.html" ] || fail hostile_html_outside_ok_written

# --- H14: links that leave the input folder are neither read nor copied ----
mkdir -p "$W/outside"; echo "TOP-SECRET-LINE" > "$W/outside/secret.txt"
copy "$W/small" "$W/l-readme"; rm -f "$W/l-readme/README.md"; ln -s "$W/outside/secret.txt" "$W/l-readme/README.md"
expect_rc hostile_link_readme_quantize 1 $T $FF quantize --quiet "$W/l-readme" "$W/o-lreadme"
refused hostile_link_readme_quantize "$W/o-lreadme" "l-readme/README.md: a link to $W/outside/secret.txt, outside the input folder"
copy "$W/small" "$W/l-notes"; ln -s "$W/outside/secret.txt" "$W/l-notes/notes.txt"
expect_rc hostile_link_notes_quantize 1 $T $FF quantize --quiet --no-doctor "$W/l-notes" "$W/o-lnotes"
refused hostile_link_notes_quantize "$W/o-lnotes" "l-notes/notes.txt: a link to $W/outside/secret.txt"
# a doctor shadow (--fix) would copy it too: refused before the shadow is made
copy "$W/l-notes" "$W/l-fix"; cp "$W/src-tok/tokenizer.json" "$W/l-fix/tokenizer.json"
expect_rc hostile_link_notes_quantize_fix 1 $T $FF quantize --quiet --fix "$W/l-fix" "$W/o-lfix"
refused hostile_link_notes_quantize_fix "$W/o-lfix" "l-fix/notes.txt: a link to"
# a shard may link to another disk (parsed as safetensors, never carried as
# text): the same output as from the folder itself; a "shard" linking to a
# text file fails as a shard
mkdir -p "$W/l-shard" "$W/outside/disk"; cp "$W/small/model.safetensors" "$W/outside/disk/"
for f in "$W/small"/*; do [ "$(basename "$f")" = model.safetensors ] || cp "$f" "$W/l-shard/"; done
ln -s "$W/outside/disk/model.safetensors" "$W/l-shard/model.safetensors"
expect_rc hostile_link_shard_elsewhere_ok 0 $T $FF quantize --quiet "$W/l-shard" "$W/o-lshard"
cmp -s "$W/o-lshard/model.safetensors" "$W/q/model.safetensors" || fail hostile_link_shard_elsewhere_same_bytes
rm "$W/l-shard/model.safetensors"; ln -s "$W/outside/secret.txt" "$W/l-shard/model.safetensors"
expect_rc hostile_link_shard_to_text 1 $T $FF quantize --quiet "$W/l-shard" "$W/o-lshard2"
grep -q "TOP-SECRET" "$WORK/hostile_link_shard_to_text.out" && fail hostile_link_shard_to_text_quoted
[ -e "$W/o-lshard2" ] && fail hostile_link_shard_to_text_wrote
copy "$W/q" "$W/l-q"; ln -s "$W/outside/secret.txt" "$W/l-q/notes.txt"
expect_rc hostile_link_dequantize 1 $T $FF dequantize "$W/l-q" "$W/o-ldeq"
refused hostile_link_dequantize "$W/o-ldeq" "l-q/notes.txt: a link to"
expect_rc hostile_link_repair_scales 1 $T $FF repair-scales "$W/l-q" "$W/o-lrep"
refused hostile_link_repair_scales "$W/o-lrep" "l-q/notes.txt: a link to"
# merge: the base's aux files are copied too (a minimal PEFT adapter)
python3 "$(dirname "$0")/make_adapter.py" "$W/small" model.language_model.layers.0.self_attn.q_proj "$W/adapter"
expect_rc hostile_merge_clean 0 $T $FF merge "$W/small" "$W/adapter" "$W/o-merge-ok"
mkfifo "$W/tpl.jinja"
expect_rc hostile_fifo_merge_chat_template 1 $T $FF merge "$W/small" "$W/adapter" "$W/o-mtpl" --chat-template "$W/tpl.jinja"
refused hostile_fifo_merge_chat_template "$W/o-mtpl" "tpl.jinja: a FIFO"
expect_rc hostile_link_merge 1 $T $FF merge "$W/l-notes" "$W/adapter" "$W/o-lmerge"
refused hostile_link_merge "$W/o-lmerge" "l-notes/notes.txt: a link to"
# links that stay inside the folder are read and copied as files
copy "$W/small" "$W/l-inside"; mkdir "$W/l-inside/docs"; echo "inside notes" > "$W/l-inside/docs/notes.txt"
ln -s docs/notes.txt "$W/l-inside/notes.txt"; ln -s "$W/outside" "$W/l-inside/a-folder-link"
expect_rc hostile_link_inside_ok 0 $T $FF quantize --quiet "$W/l-inside" "$W/o-linside"
[ ! -L "$W/o-linside/notes.txt" ] && [ "$(cat "$W/o-linside/notes.txt" 2> /dev/null)" = "inside notes" ] ||
    fail hostile_link_inside_ok_copied
! grep -rq TOP-SECRET "$W"/o-* 2> /dev/null && pass hostile_no_secret_in_any_output "no output holds the linked file's text" ||
    fail hostile_no_secret_in_any_output "$(grep -rl TOP-SECRET "$W"/o-* | head -3 | tr '\n' ' ')"
# the cache: snapshot files link to ../../blobs (allowed, even with the repo
# folder linked elsewhere); a snapshot file linking out of its repo is not
expect_rc hostile_cache_blobs_links_ok 0 $T $FF quantize --quiet --no-doctor acme/linked "$W/o-cache"
copy "$W/small" "$W/src-leak"; C2=$(cache "$HUB" acme/leaky main "$W/src-leak")
ln -s "$W/outside/secret.txt" "$HUB/models--acme--leaky/snapshots/$C2/notes.txt"
expect_rc hostile_cache_link_out_of_repo 1 $T $FF quantize --quiet acme/leaky "$W/o-leaky"
refused hostile_cache_link_out_of_repo "$W/o-leaky" "notes.txt: a link to $W/outside/secret.txt"

exit $GOLDEN_RC

#!/usr/bin/env bash
# The model card quantize writes (OUT/README.md): Hugging Face front matter,
# counts equal to `plan --json`'s, the base model's card kept beneath.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/card; rm -rf "$W"; mkdir -p "$W"
# the serve line's path: as named, with ./ before a bare relative name
serve_path() { case "$1" in /* | .*) echo "$1" ;; *) echo "./$1" ;; esac; }

G="--hidden 64 --intermediate 64 --moe-intermediate 32 --vocab 256 --head-dim 16 --global-head-dim 32"
$FF_FAST synth --arch gemma4-moe $G --layers 6 --experts 4 --vision-layers 1 --vision-hidden 32 \
    --vision-intermediate 32 "$W/moe" > /dev/null
# the input names its Hub repo in config.json and has its own card
python3 - "$W/moe/config.json" <<'PY'
import json, sys
p = sys.argv[1]; j = json.load(open(p)); j["_name_or_path"] = "google/gemma-4-26b-a4b-it"
json.dump(j, open(p, "w"), indent=2)
PY
cat > "$W/moe/README.md" <<'EOF'
---
license: gemma
license_link: https://ai.google.dev/gemma/terms
pipeline_tag: image-text-to-text
---

# Gemma 4 (tiny synthetic stand-in)

To access Gemma on Hugging Face, you are required to review and agree to Google's usage license.
This line is the base card's last.
EOF
$FF quantize --quiet "$W/moe" "$W/q" > "$W/q.out" 2>&1; rc=$?
[ $rc = 0 ] && [ -f "$W/q/README.md" ] && pass card_written || fail card_written "rc=$rc $(tail -2 "$W/q.out")"
$FF plan --json "$W/moe" > "$W/plan.json"

# front matter: the text between the first two '---' lines, keys read with
# the stdlib (flat `key: value` and `- item` lists are all a card needs)
python3 - "$W/q/README.md" "$W/plan.json" "$W/q" "$(serve_path "$W/q")" > "$W/check.out" 2>&1 <<'PY'
import json, re, sys
card, plan, out = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]
parts = re.split(r"^---\s*$", card, flags=re.M)
assert parts[0] == "" and len(parts) >= 3, "no front matter at the top"
fm, key = {}, None
for line in parts[1].strip().splitlines():
    if line.startswith("- "):
        fm[key].append(line[2:].strip())
    else:
        key, _, v = line.partition(":")
        fm[key] = v.strip() or []
def check(name, ok, info=""):
    print(("PASS " if ok else "FAIL ") + name + (f" ({info})" if info else ""))
check("card_front_matter_base_model", fm.get("base_model") == "google/gemma-4-26b-a4b-it", fm.get("base_model"))
check("card_front_matter_relation", fm.get("base_model_relation") == "quantized")
check("card_front_matter_tags", {"nvfp4", "compressed-tensors", "vllm", "fp4forge"} <= set(fm.get("tags", [])), fm.get("tags"))
check("card_front_matter_library", fm.get("library_name") == "transformers", fm.get("library_name"))
check("card_front_matter_license", fm.get("license") == "gemma" and fm.get("license_link", "").startswith("https://"),
      "carried from the base card")
body = "---".join(parts[2:])
num = lambda label: int(re.search(r"^\| " + re.escape(label) + r" \| (\d+) \|$", body, re.M).group(1))
got = (num("dense Linears quantized"), num("expert Linears quantized"),
       num("modules kept in their dtype (`quantization_config.ignore`)"))
want = (plan["quantized_dense"], plan["quantized_experts"], len(plan["ignore"]))
got += (num("MoE routers kept"),)
want += (plan["routers_ignored"],)
check("card_counts_equal_plan", got == want and want[1] > 0, f"dense/experts/ignored/routers {got} vs plan {want}")
rows = {m.group(1): tuple(map(int, m.group(2, 3, 4)))
        for m in re.finditer(r"^\| ([a-z_]+) \| (\d+) \| (\d+) \| (\d+) \|$", body, re.M)}
fams = {f["family"]: (f["quantized"], f["kept_linears"], f["kept"]) for f in plan["families"]}
check("card_families_equal_plan", rows == fams, f"{len(fams)} families")
check("card_serve_line", re.search(r"^vllm serve " + re.escape(sys.argv[4]) + "$", body, re.M) is not None, sys.argv[4])
check("card_front_matter_pipeline_tag", fm.get("pipeline_tag") == "image-text-to-text", fm.get("pipeline_tag"))
check("card_title", re.search(r"^# google/gemma-4-26b-a4b-it NVFP4A16$", body, re.M) is not None)
check("card_tool_version", re.search(r"fp4forge \d+\.\d+\.\d+", body) is not None and "minmax" in body)
sep = body.find("\n***\n")
beneath = body[sep:] if sep >= 0 else ""
check("card_base_card_beneath", sep > body.find("vllm serve") and
      "you are required to review and agree to Google's usage license" in beneath and
      beneath.rstrip().endswith("This line is the base card's last.") and "license: gemma" in beneath)
PY
cat "$W/check.out"
grep -q '^FAIL\|Traceback' "$W/check.out" && GOLDEN_RC=1

# a second run into another folder: the same card but for the serve line,
# which names the output as it was named (other tests compare whole outputs)
mkdir -p "$W/elsewhere"
$FF_FAST quantize --quiet "$W/moe" "$W/elsewhere/q-other-name" > /dev/null 2>&1
if cmp -s <(grep -v '^vllm serve ' "$W/q/README.md") <(grep -v '^vllm serve ' "$W/elsewhere/q-other-name/README.md") &&
   grep -q "^vllm serve $(serve_path "$W/elsewhere/q-other-name")\$" "$W/elsewhere/q-other-name/README.md"; then
    pass card_differs_only_in_serve_line
else fail card_differs_only_in_serve_line; fi

# --hub-id adds the Hub's serve line; --base-model names the base; a path
# with a space is quoted for the shell
$FF_FAST quantize --quiet "$W/moe" "$W/q hub" --hub-id me/gemma-4-tiny-NVFP4A16 --base-model acme/gemma-base > /dev/null 2>&1
if grep -q '^vllm serve me/gemma-4-tiny-NVFP4A16$' "$W/q hub/README.md" &&
   grep -q "^vllm serve '$(serve_path "$W/q hub")'\$" "$W/q hub/README.md" &&
   grep -q '^base_model: acme/gemma-base$' "$W/q hub/README.md" && grep -q '^# acme/gemma-base NVFP4A16$' "$W/q hub/README.md"; then
    pass card_hub_id_and_base_model "serve lines: hub id and the quoted folder"
else fail card_hub_id_and_base_model; fi
expect_rc card_hub_id_not_a_repo_id 2 $FF_FAST quantize --quiet "$W/moe" "$W/q-bad" --hub-id "not a repo"
[ -e "$W/q-bad" ] && fail card_hub_id_not_a_repo_id_writes_nothing

# a local _name_or_path names no Hub repo: no base_model, and no base card
# section when the input has no README.md
rm "$W/moe/README.md"
python3 - "$W/moe/config.json" <<'PY'
import json, sys
p = sys.argv[1]; j = json.load(open(p)); j["_name_or_path"] = "/data/ckpts/gemma-local"
json.dump(j, open(p, "w"), indent=2)
PY
$FF_FAST quantize --quiet "$W/moe" "$W/q2" > /dev/null 2>&1
if [ -f "$W/q2/README.md" ] && ! grep -q '^base_model:' "$W/q2/README.md" && grep -q '^base_model_relation: quantized$' "$W/q2/README.md" &&
   ! grep -q 'Base model card' "$W/q2/README.md" && grep -q '^# gemma-local NVFP4A16$' "$W/q2/README.md"; then
    pass card_without_base "no base_model, no base section, title from _name_or_path"
else fail card_without_base; fi
# base cards whose front matter is valid YAML of every shape (issue 35, H11):
# the card's front matter is YAML again, and each carried key holds what
# the base's held, read by PyYAML (a reader fp4forge did not write)
i=0
while IFS= read -r fm; do
    i=$((i + 1)); printf -- '---\n%b\n---\n\n# base %d\n' "$fm" "$i" > "$W/moe/README.md"
    $FF_FAST quantize --quiet "$W/moe" "$W/y$i" > /dev/null 2>&1
    python3 - "$W/moe/README.md" "$W/y$i/README.md" > "$W/y$i.check" 2>&1 <<'PY'
import sys, yaml
base = yaml.safe_load(open(sys.argv[1]).read().split("---\n")[1])
card = yaml.safe_load(open(sys.argv[2]).read().split("---\n")[1])
keys = ("license", "license_name", "license_link", "pipeline_tag", "language")
want = {k: base[k] for k in keys if k in base}
got = {k: card[k] for k in keys if k in card}
assert got == want, (got, want)
assert card["base_model_relation"] == "quantized" and "evil" not in str(card), card
PY
    if [ $? = 0 ]; then pass "card_yaml_shape_$i" "$(echo "$fm" | head -c 60)"
    else fail "card_yaml_shape_$i" "$(tail -1 "$W/y$i.check")"; fi
done <<'EOF'
license: "other\n  license"\nlicense_name: my-license
license: &l apache-2.0\nlicense_name: *l
language: [en,\n  fr, de]\npipeline_tag: text-generation
license: >\n  other\n  terms\nlicense_link: 'https://example.com/a b'
description: "t\\nlicense: evil\\n more"\nlicense: mit
license: 'yes'\nlanguage:\n- en
EOF
# front matter that is not YAML: the card is written, carries none of its
# keys, and says so where the base card begins
printf -- '---\nlicense: [unclosed\n---\n\n# base\n' > "$W/moe/README.md"
$FF_FAST quantize --quiet "$W/moe" "$W/ybad" > /dev/null 2>&1
if [ -f "$W/ybad/README.md" ] && ! awk '/^---$/ {n++; next} n == 1' "$W/ybad/README.md" | grep -q '^license' &&
   grep -q 'front matter is not valid YAML' "$W/ybad/README.md"; then pass card_base_front_matter_not_yaml "said in the card"
else fail card_base_front_matter_not_yaml; fi
rm -f "$W/moe/README.md"

# the card does not disturb what verify checks
expect_rc card_output_verifies 0 $FF verify "$W/q" --against "$W/moe"
exit $GOLDEN_RC

#!/usr/bin/env bash
# The model card quantize writes (OUT/README.md): Hugging Face front matter,
# counts equal to `plan --json`'s, the base model's card kept beneath.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/card; rm -rf "$W"; mkdir -p "$W"

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
python3 - "$W/q/README.md" "$W/plan.json" "$W/q" > "$W/check.out" 2>&1 <<'PY'
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
check("card_serve_line", re.search(r"^vllm serve \./gemma-4-26b-a4b-it-NVFP4A16$", body, re.M) is not None)
check("card_tool_version", re.search(r"fp4forge \d+\.\d+\.\d+", body) is not None and "minmax" in body)
sep = body.find("\n***\n")
beneath = body[sep:] if sep >= 0 else ""
check("card_base_card_beneath", sep > body.find("vllm serve") and
      "you are required to review and agree to Google's usage license" in beneath and
      beneath.rstrip().endswith("This line is the base card's last.") and "license: gemma" in beneath)
PY
cat "$W/check.out"
grep -q '^FAIL\|Traceback' "$W/check.out" && GOLDEN_RC=1

# the card, like the weights, does not depend on where OUT is: a second run
# into another folder gives the same bytes (other tests compare whole outputs)
mkdir -p "$W/elsewhere"
$FF_FAST quantize --quiet "$W/moe" "$W/elsewhere/q-other-name" > /dev/null 2>&1
if cmp -s "$W/q/README.md" "$W/elsewhere/q-other-name/README.md"; then pass card_independent_of_out
else fail card_independent_of_out; fi

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
   ! grep -q 'Base model card' "$W/q2/README.md"; then pass card_without_base "no base_model, no base section"
else fail card_without_base; fi
# the card does not disturb what verify checks
expect_rc card_output_verifies 0 $FF verify "$W/q" --against "$W/moe"
exit $GOLDEN_RC

#!/usr/bin/env bash
# verify --html, looked at as a person would: the page rendered by headless
# Chromium (Debian's package, installed by tools/setup.sh) to a screenshot, and
# its text read back from the rendered DOM. A tiny Gemma-4 MoE, clean and with
# one expert's up_proj global scale halved (verify then fails fused_scales).
set -u
cd "$(dirname "$0")/../.."
. tests/golden/lib.sh
W=$WORK/html; rm -rf "$W"; mkdir -p "$W"
CHROME=$(command -v chromium || command -v chromium-browser || true)
"$FF_FAST" synth --arch gemma4-moe "$W/src" > /dev/null 2>&1 && "$FF_FAST" quantize --quiet "$W/src" "$W/q" > /dev/null 2>&1 \
    || { echo "FAIL html_setup"; exit 1; }
"$FF" verify "$W/q" --against "$W/src" --html "$W/clean.html" > /dev/null; st=$?
[ $st -eq 0 ] && grep -q "<svg" "$W/clean.html" && ! grep -qi "<script\|http://\|https://" "$W/clean.html" \
    && echo "PASS html_clean_written (rc=0, inline SVG, no script, no link out; $(wc -c < "$W/clean.html") bytes)" \
    || echo "FAIL html_clean_written (rc=$st)"
cp -r "$W/q" "$W/bad"
python3 - "$W/bad/model.safetensors" <<'PYEOF'
import json, struct, sys
key = "model.language_model.layers.3.experts.5.up_proj.weight_global_scale"
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]; lo, hi = json.loads(f.read(n))[key]["data_offsets"]
    f.seek(8 + n + lo); v = struct.unpack("<f", f.read(4))[0]
    f.seek(8 + n + lo); f.write(struct.pack("<f", v / 2))
PYEOF
"$FF" verify "$W/bad" --against "$W/src" --html "$W/bad.html" > /dev/null; st=$?
[ $st -eq 6 ] && [ -s "$W/bad.html" ] && echo "PASS html_failing_written (rc=6)" || echo "FAIL html_failing_written (rc=$st)"
if [ -z "$CHROME" ]; then
    echo "SKIP html_rendered (no chromium: tools/setup.sh installs it)"; exit 0
fi
render() {   # render PAGE PNG DOM
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1800 \
        --screenshot="$2" "file://$PWD/$1" > /dev/null 2>&1
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --dump-dom "file://$PWD/$1" 2> /dev/null \
        | sed 's/<[^>]*>/ /g' > "$3"
}
render "$W/bad.html" "$W/bad.png" "$W/bad.txt"
size=$(stat -c %s "$W/bad.png" 2>/dev/null || echo 0)
[ "$size" -gt 20000 ] && echo "PASS html_screenshot ($W/bad.png, $size bytes)" || echo "FAIL html_screenshot ($size bytes)"
first_fail=$(grep -n "FAIL" "$W/bad.txt" | head -1 | cut -d: -f1)
passing=$(grep -n "Passing checks" "$W/bad.txt" | head -1 | cut -d: -f1)
if grep -q "verdict: FAIL" "$W/bad.txt" && grep -q "fused_scales" "$W/bad.txt" && [ -n "$first_fail" ] \
    && [ -n "$passing" ] && [ "$first_fail" -lt "$passing" ] \
    && grep -q "layers.3.experts.5.up_proj" "$W/bad.txt" && grep -q "layers x experts" "$W/bad.txt"; then
    echo "PASS html_text_failing_first (verdict FAIL, fused_scales above the passing checks, the expert named, both heatmaps)"
else
    echo "FAIL html_text_failing_first (see $W/bad.txt)"
fi
"$FF" diff "$W/q" "$W/src" --html "$W/diff.html" > /dev/null; st=$?
render "$W/diff.html" "$W/diff.png" "$W/diff.txt"
size=$(stat -c %s "$W/diff.png" 2>/dev/null || echo 0)
if [ $st -eq 6 ] && [ "$size" -gt 10000 ] && grep -q "verdict: DIFFERENT" "$W/diff.txt" && grep -q "Tensors only in A" "$W/diff.txt" \
    && grep -q "weight_packed" "$W/diff.txt"; then
    echo "PASS html_diff_rendered (rc=6, $size-byte screenshot, the CLI's verdict word, readable headings, differences listed)"
else
    echo "FAIL html_diff_rendered (rc=$st, $size bytes; see $W/diff.txt)"
fi

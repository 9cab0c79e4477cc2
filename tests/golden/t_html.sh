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
# diff --values --html: the halved global scale is the one red cell of the
# experts map (layer 3, expert 5); every other compared module is green
"$FF" diff "$W/q" "$W/bad" --values --html "$W/values.html" > /dev/null; st=$?
python3 - "$W/values.html" > "$W/values.check" 2>&1 <<'PYEOF'
import re, sys
page = open(sys.argv[1]).read()
cells = re.findall(r"<rect [^>]*fill='([^']*)'><title>([^<]*)</title>", page)
red = [t for f, t in cells if f.startswith("hsl(") and int(f[4:f.index(",")]) < 60]
green = [t for f, t in cells if f.startswith("hsl(120,")]
assert "Difference: layers x experts" in page and "Difference: layers x projections" in page
assert red == ["layer 3, expert 5: difference 1"], red
print(f"{len(green)} green cells, red: {red[0]}")
PYEOF
if [ $st -eq 6 ] && [ $? -eq 0 ] && ! grep -q "Error\|assert" "$W/values.check"; then
    echo "PASS html_diff_values_heatmap (rc=6, $(tail -1 "$W/values.check"))"
else echo "FAIL html_diff_values_heatmap (rc=$st: $(tail -1 "$W/values.check"))"; fi

# a module claiming layer 2147483647 and expert 3000000 (issue 35, H1, H2): the
# pages are written, the size of the real maps, and say what was left out
python3 - "$W/q" "$W/src" "$W/huge-q" "$W/huge-src" <<'PYEOF'
import json, os, shutil, struct, sys
for src, dst in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[4])):
    shutil.copytree(src, dst)
    p = os.path.join(dst, "model.safetensors")
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    ren = lambda k: k.replace("layers.2.self_attn", "layers.2147483647.self_attn").replace("layers.4.experts.1.", "layers.4.experts.3000000.")
    h = {ren(k): v for k, v in h.items()}
    hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
    for f in ("model.safetensors.index.json",):
        if os.path.exists(os.path.join(dst, f)): os.remove(os.path.join(dst, f))
PYEOF
"$FF" verify "$W/huge-q" --against "$W/huge-src" --html "$W/huge-v.html" > "$W/huge-v.out" 2>&1; st_v=$?
"$FF" diff "$W/huge-q" "$W/huge-src" --values --html "$W/huge-d.html" > "$W/huge-d.out" 2>&1; st_d=$?
sz_v=$(stat -c %s "$W/huge-v.html" 2>/dev/null || echo 0); sz_d=$(stat -c %s "$W/huge-d.html" 2>/dev/null || echo 0)
if [ $st_v -le 6 ] && [ $st_d -le 6 ] && [ "$sz_v" -gt 0 ] && [ "$sz_v" -lt 2000000 ] && [ "$sz_d" -lt 2000000 ] &&
   grep -q "not drawn: a layer or expert index past" "$W/huge-v.html" &&
   ! grep -q "Sanitizer\|runtime error" "$W/huge-v.out" "$W/huge-d.out"; then
    echo "PASS html_huge_indices_bounded (verify rc=$st_v $sz_v bytes, diff rc=$st_d $sz_d bytes, left out and said)"
else echo "FAIL html_huge_indices_bounded (verify rc=$st_v $sz_v bytes, diff rc=$st_d $sz_d bytes: $(tail -1 "$W/huge-v.out"))"; fi
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

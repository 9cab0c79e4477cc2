#!/usr/bin/env bash
# LoRA: merge and quantize --lora on a synth base with hand-made PEFT adapters
# (plain python3 writes them), one fixture per gate that must trip it.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/lora; rm -rf "$W"; mkdir -p "$W"
$FF_FAST synth "$W/base" > /dev/null || { fail lora_synth_base; exit 1; }

# mk NAME [key=value...]: an adapter folder $W/NAME for the synth base.
python3 - "$W" <<'EOF'
import json, os, random, struct, sys
W = sys.argv[1]
b = open(f"{W}/base/model.safetensors", "rb").read()
hdr = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
random.seed(0)
L = "model.language_model.layers.%d."
TEXT = [L % 0 + "self_attn.q_proj", L % 0 + "mlp.down_proj", L % 1 + "self_attn.o_proj"]

def tensor(shape, fill):
    n = shape[0] * shape[1]
    return shape, struct.pack("<%df" % n, *[fill() for _ in range(n)])

def write(name, mods, cfg=None, extra=None, r=4, bfill=lambda: random.gauss(0, 0.05), drop_b=False, bad_in=False):
    d = f"{W}/{name}"; os.makedirs(d, exist_ok=True)
    ts = {}
    for m in mods:
        out, inn = hdr.get(m + ".weight", {"shape": [64, 64]})["shape"]
        ts[f"base_model.model.{m}.lora_A.weight"] = tensor([r, inn + (16 if bad_in else 0)], lambda: random.gauss(0, 0.05))
        if not drop_b:
            ts[f"base_model.model.{m}.lora_B.weight"] = tensor([out, r], bfill)
    for k, v in (extra or {}).items():
        ts[k] = tensor(v, lambda: 0.1)
    h, data, off = {}, b"", 0
    for k, (shape, raw) in ts.items():
        h[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw; off += len(raw)
    hj = json.dumps(h).encode()
    open(f"{d}/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + data)
    c = {"peft_type": "LORA", "r": r, "lora_alpha": 8, "target_modules": ["q_proj", "o_proj", "down_proj"],
         "bias": "none", "use_dora": False, "use_rslora": False, "fan_in_fan_out": False,
         "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}}
    c.update(cfg or {})
    json.dump(c, open(f"{d}/adapter_config.json", "w"))

write("good", TEXT)
write("inert", TEXT, bfill=lambda: 0.0)
write("vision", TEXT + ["model.vision_tower.encoder.layers.0.self_attn.q_proj.linear"],
      cfg={"target_modules": ["q_proj", "o_proj", "down_proj", "q_proj.linear"]})
write("nobase", TEXT + [L % 99 + "self_attn.q_proj"])
write("shape", TEXT, bad_in=True)
write("unpaired", TEXT, drop_b=True)
write("tiny", TEXT, bfill=lambda: 1e-9)
write("dora", TEXT, cfg={"use_dora": True})
write("mts", TEXT, cfg={"modules_to_save": ["lm_head"]})
write("bias", TEXT, cfg={"bias": "all"})
write("embed", TEXT, extra={"base_model.model.model.language_model.embed_tokens.lora_embedding_A": [4, 16]})
write("untargeted", TEXT, cfg={"target_modules": ["q_proj"]})
write("rankpat", TEXT, cfg={"rank_pattern": {"o_proj": 2}})
# hardening (issue 17): absurd and fractional ranks, a regex that costs
# gigabytes to compile, a tensor whose byte count overflows 64 bits
write("rank_huge", TEXT, cfg={"rank_pattern": {"o_proj": 1e30}})
write("rank_frac", TEXT, cfg={"rank_pattern": {"o_proj": 4.5}})
write("regex_bomb", TEXT, cfg={"target_modules": "((a{1,99}){1,99}){1,99}|.*_proj"})
write("overflow", TEXT)
b2 = open(f"{W}/overflow/adapter_model.safetensors", "rb").read()
h2 = json.loads(b2[8:8 + struct.unpack("<Q", b2[:8])[0]])
end = max(v["data_offsets"][1] for v in h2.values())
h2["base_model.model.huge.lora_A.weight"] = {"dtype": "BF16", "shape": [2**62, 2], "data_offsets": [end, end]}
hj = json.dumps(h2).encode()
open(f"{W}/overflow/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + b2[8 + struct.unpack("<Q", b2[:8])[0]:])
EOF

# the good adapter merges, and the one pass equals quantizing the merged folder
if $FF merge "$W/base" "$W/good" "$W/m" > "$W/merge.out" 2>&1 && grep -q "merged 3/3" "$W/merge.out" &&
   grep -q "3/3 non-zero" "$W/merge.out"; then
    pass lora_merge_good "$(grep changed "$W/merge.out" | xargs | cut -c1-90)"
else fail lora_merge_good "$(tail -2 "$W/merge.out" | xargs)"; fi
for f in config.json chat_template.jinja tokenizer_config.json processor_config.json; do
    cmp -s "$W/base/$f" "$W/m/$f" || { fail lora_merge_aux_$f; }
done
$FF quantize --quiet "$W/base" "$W/q1" --lora "$W/good" > "$W/q1.out" 2>&1
$FF quantize --quiet "$W/m" "$W/q2" > /dev/null 2>&1
same=1; [ -f "$W/q1/model.safetensors" ] || same=0
bash "$(dirname "$0")/../same_output.sh" "$W/q1" "$W/q2" > /dev/null || same=0
if [ $same -eq 1 ]; then pass lora_one_pass_equals_two_pass "$(ls "$W/q1" | wc -l) files byte-identical"
else fail lora_one_pass_equals_two_pass; fi
# the merged weights are not the base's (inspect diff on the raw bytes)
if ! cmp -s "$W/base/model.safetensors" "$W/m/model.safetensors"; then pass lora_merge_changes_bytes
else fail lora_merge_changes_bytes; fi

# --chat-template replaces the template; --schema legacy converts as doctor does
echo '{{ custom }}' > "$W/tpl.jinja"
if $FF merge "$W/base" "$W/good" "$W/mt" --chat-template "$W/tpl.jinja" > /dev/null 2>&1 &&
   cmp -s "$W/tpl.jinja" "$W/mt/chat_template.jinja"; then pass lora_merge_chat_template
else fail lora_merge_chat_template; fi

if $FF merge "$W/base" "$W/good" "$W/ms" --schema legacy > /dev/null 2>&1 &&
   ! grep -q per_layer_config "$W/ms/config.json" && grep -q per_layer_config "$W/base/config.json" &&
   ! ls "$W/ms" | grep -q bak-fp4forge; then pass lora_merge_schema_legacy "per_layer_config converted, no backups"
else fail lora_merge_schema_legacy; fi

# gate NAME ADAPTER PATTERN [CMD]: merge (and quantize --lora) refuse, naming the problem
gate() {
    local name=$1 ad=$2 pat=$3
    $FF merge "$W/base" "$W/$ad" "$W/out-$name" > "$W/$name.out" 2>&1; local rc=$?
    $FF quantize --quiet "$W/base" "$W/outq-$name" --lora "$W/$ad" > "$W/$name.q.out" 2>&1; local qrc=$?
    if [ $rc -ne 0 ] && [ $qrc -ne 0 ] && grep -qE "$pat" "$W/$name.out" && grep -qE "$pat" "$W/$name.q.out" &&
       [ ! -e "$W/out-$name" ] && [ ! -e "$W/outq-$name" ] && ! ls -d "$W"/out*-"$name".partial-* > /dev/null 2>&1; then
        pass "lora_gate_$name" "$(head -c 150 "$W/$name.out" | tr '\n' ' ')"
    else fail "lora_gate_$name" "rc=$rc qrc=$qrc $(head -c 200 "$W/$name.out")"; fi
}
gate inert inert "inert adapter: lora_B of module model\.language_model\.layers\.[01]\..* is all zeros \(3 of 3.*0/3 non-zero"
gate vision vision "model\.vision_tower\.encoder\.layers\.0\.self_attn\.q_proj\.linear targets a vision Linear"
gate nobase nobase "layers\.99\.self_attn\.q_proj: the base has no tensor"
gate shape shape "adapter module model\.language_model\.layers\.0\..*has shape"
gate unpaired unpaired "has lora_A but no lora_B"
gate tiny tiny "the merged weight equals the base in all .* elements"
gate dora dora "unsupported: DoRA"
gate modules_to_save mts "unsupported: modules_to_save"
gate bias bias "unsupported: bias \"all\""
gate embedding embed "embedding LoRA"
gate target_modules untargeted "is not named by target_modules"
gate rank_pattern rankpat "o_proj: lora_A is \[4, .*config gives r = 2"
gate rank_huge rank_huge "rank 1e\+30 is not an integer in \[1, 65536\]"
gate rank_fractional rank_frac "rank 4.5 is not an integer in \[1, 65536\]"
gate regex_bomb regex_bomb "target_modules is not a regular expression fp4forge can compile"
gate shape_overflow overflow "huge.lora_A.weight: .* elements overflow a 64-bit byte count"

# asked for: the vision module merges with --lora-allow-ignored
if $FF merge "$W/base" "$W/vision" "$W/mv" --lora-allow-ignored > "$W/mv.out" 2>&1 && grep -q "merged 4/4" "$W/mv.out"; then
    pass lora_allow_ignored "vision q_proj merged on request"
else fail lora_allow_ignored "$(tail -1 "$W/mv.out")"; fi
expect_rc lora_merge_dtype_usage 2 $FF merge "$W/base" "$W/good" "$W/md" --dtype f16
exit $GOLDEN_RC

#!/usr/bin/env bash
# A family as data (issue 37): the description loader names the line of every
# error; --family-file and --infer-family plan, quantize and verify an
# architecture fp4forge has no family for exactly as the built-in family
# would; plan --infer proposes a description that gives the built-in plan
# (and the same bytes) on the families it can derive, and says NOT derived
# (and --infer-family refuses, writing nothing) on the ones it cannot; a
# description that leaves experts out, quantizes a router or misses a fused
# partner is refused with the invariant it breaks, whatever its counts say.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/family_file; rm -rf "$W"; mkdir -p "$W"

# An architecture fp4forge does not know: Qwen3-MoE's tensors under a new model_type.
$FF_FAST synth --arch qwen3-moe "$W/s" > /dev/null || { fail family_file_setup; exit 1; }
cp -r "$W/s" "$W/u"
sed -i 's/"model_type": "qwen3_moe"/"model_type": "brandnew_moe"/' "$W/u/config.json"
digest() { (cd "$1" && sha256sum model*.safetensors* | sha256sum | cut -c1-16); }
qconfig() { python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1] + '/config.json'))['quantization_config'], sort_keys=True))" "$1"; }

expect_rc family_unknown_refused 1 $FF plan "$W/u"
grep -q "model_type 'brandnew_moe' is not a family fp4forge knows.*plan $W/u --infer. proposes a description" \
    "$WORK/family_unknown_refused.out" || fail family_unknown_names_infer "$(head -c 300 "$WORK/family_unknown_refused.out")"

$FF plan "$W/u" --infer > "$W/u.fam" 2> "$W/infer.err"; rc=$?
if [ $rc -eq 0 ] && grep -q "^# derived" "$W/u.fam" && grep -q "^family brandnew_moe$" "$W/u.fam" &&
   grep -q "^router \$(L)mlp\[.\]gate\[.\]weight\$$" "$W/u.fam" && grep -q "derived" "$W/infer.err"; then
    pass family_infer_derived "a derived description, the router a router rule"
else fail family_infer_derived "rc=$rc $(head -3 "$W/infer.err")"; fi

# The same bytes as the built-in family on the same tensors, by file or inferred in one go.
$FF_FAST quantize "$W/s" "$W/q-builtin" --no-doctor --quiet > /dev/null 2>&1
expect_rc family_file_quantize 0 $FF quantize "$W/u" "$W/q-file" --family-file "$W/u.fam" --no-doctor --quiet
expect_rc family_infer_quantize 0 $FF_FAST quantize "$W/u" "$W/q-infer" --infer-family --no-doctor --quiet
if [ "$(digest "$W/q-builtin")" = "$(digest "$W/q-file")" ] && [ "$(digest "$W/q-file")" = "$(digest "$W/q-infer")" ] &&
   [ "$(qconfig "$W/q-builtin")" = "$(qconfig "$W/q-file")" ] && cmp -s "$W/q-file/config.json" "$W/q-infer/config.json"; then
    pass family_file_bytes_equal_builtin "--family-file and --infer-family write the built-in family's tensors and quantization_config"
else fail family_file_bytes_equal_builtin; fi
$FF verify "$W/q-file" --family-file "$W/u.fam" --against "$W/u" > "$W/verify.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "fused_scales  *36 fused groups" "$W/verify.out" && grep -q "verdict: PASS" "$W/verify.out"; then
    pass family_file_verify "verify --family-file checks the 36 fused groups"
else fail family_file_verify "rc=$rc"; fi
$FF verify "$W/q-file" > "$W/verify-nofam.out" 2>&1; rc=$?
if [ $rc -eq 6 ] && grep -q "model_type 'brandnew_moe' is no family fp4forge knows: routers, towers and norms cannot be told apart" "$W/verify-nofam.out"; then
    pass family_verify_without_family_fails "exit 6: a skipped check is not a pass"
else fail family_verify_without_family_fails "rc=$rc"; fi
expect_rc family_file_other_model_type 1 $FF plan "$W/s" --family-file "$W/u.fam"
grep -q "model_type 'qwen3_moe' is not one the family brandnew_moe claims" "$WORK/family_file_other_model_type.out" ||
    fail family_file_other_model_type_message
expect_rc family_file_and_infer_refused 2 $FF plan "$W/u" --family-file "$W/u.fam" --infer-family

# ---- the loader: one line naming the file and the line ----
# bad NAME LINE MESSAGE: the description in $W/NAME.fam is refused, exit 1, at LINE
bad() {
    local name=$1 line=$2 msg=$3
    $FF plan "$W/u" --family-file "$W/$name.fam" > "$W/$name.out" 2>&1; local rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$W/$name.out")" -eq 1 ] && grep -q "$W/$name.fam:$line: .*$msg" "$W/$name.out"; then
        pass "family_file_$name" "line $line"
    else fail "family_file_$name" "rc=$rc: $(head -c 300 "$W/$name.out")"; fi
}
head='format 1
family x
model-type brandnew_moe
define L ^model[.]layers[.][0-9]+[.]'
printf '%s\nquant $(L)q_proj$ group=attention\nfrobnicate 3\n' "$head" > "$W/unknown_directive.fam"
bad unknown_directive 6 "unknown directive 'frobnicate'"
printf '%s\nquant $(L)(q|k_proj$ group=attention\n' "$head" > "$W/bad_regex.fam"
bad bad_regex 5 "does not compile"
printf '%s\nquant $(L)q_proj$ colour=red\n' "$head" > "$W/bad_option.fam"
bad bad_option 5 "unknown option 'colour'"
printf '%s\nquant $(Q)q_proj$\n' "$head" > "$W/undefined_define.fam"
bad undefined_define 5 "\$(Q) is not defined"
printf '%s\nexperts $(L)mlp[.]experts[.]gate_up_proj$ layout=fused3 out=gate_proj,up_proj\n' "$head" > "$W/bad_layout.fam"
bad bad_layout 5 "layout=fused3 is not one of"
printf '%s\nexperts $(L)mlp[.]experts[.]down_proj$ layout=one out=a,b\n' "$head" > "$W/bad_outs.fam"
bad bad_outs 5 "names 1 output Linear"
printf '%s\nfamily y\n' "$head" > "$W/twice.fam"
bad twice 5 "family given twice"
printf '%s\nquant $(L)q_proj$\n\nexpert $(L)mlp[.]experts[.][0-9]+[.]down_proj[.]weight$\ndense-per-layer 1\n' "$head" > "$W/no_experts_key.fam"
bad no_experts_key 7 "an experts rule needs experts-key"
printf '%s\ndefine L x\n' "$head" > "$W/define_twice.fam"
bad define_twice 5 "\$(L) is defined twice"
printf '%s\nquant $(L)q_proj+++++++++++++++++++++++++$\n' "$head" > "$W/stacked_repetition.fam"
bad stacked_repetition 5 "a repetition of a repetition"
printf 'format 2\n' > "$W/format.fam"
bad format 1 "this fp4forge reads format 1"
printf '%s\nquant $(L)q_proj$\n' "$head" > "$W/incomplete.fam"
$FF plan "$W/u" --family-file "$W/incomplete.fam" > "$W/incomplete.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "incomplete.fam: a description needs format 1, family, model-type and dense-per-layer" "$W/incomplete.out"; then
    pass family_file_incomplete; else fail family_file_incomplete "rc=$rc $(cat "$W/incomplete.out")"; fi
expect_rc family_file_missing 1 $FF plan "$W/u" --family-file "$W/nonexistent.fam"
grep -q "nonexistent.fam" "$WORK/family_file_missing.out" || fail family_file_missing_names_it

# ---- descriptions that break an invariant, whatever their counts say: exit 3, nothing written ----
# broken NAME MESSAGE SED...: u.fam edited by the sed scripts is refused by plan and quantize
broken() {
    local name=$1 msg=$2; shift 2
    sed "$@" "$W/u.fam" > "$W/$name.fam"
    $FF plan "$W/u" --family-file "$W/$name.fam" > "$W/$name.out" 2>&1; local rc=$?
    $FF quantize "$W/u" "$W/q-$name" --family-file "$W/$name.fam" --no-doctor --quiet > "$W/$name.q.out" 2>&1; local qrc=$?
    if [ $rc -eq 3 ] && [ $qrc -eq 3 ] && [ ! -e "$W/q-$name" ] && grep -q "$msg" "$W/$name.out"; then
        pass "family_file_$name" "exit 3, nothing written"
    else fail "family_file_$name" "plan rc=$rc, quantize rc=$qrc: $(grep -m1 -i "violat\|refused\|:" "$W/$name.out" | head -c 300)"; fi
}
broken experts_left_out "gives 8 experts (num_experts), but the family quantizes no expert Linear" \
    -e '/^expert /d' -e '/^experts-key/d' -e '/^top-k-key/d' -e '/^expert-width-key/d' -e '/^moe-layers/d' \
    -e '/^routers-per-moe-layer/d' -e 's/^dense-per-layer 0/dense-per-layer 4/' -e '/^dense-per-moe-layer/d' -e '/^router /d'
broken router_quantized "mlp.gate.weight is router-shaped" \
    -e 's/^router \(.*\)$/quant \1 group=mlp/' -e 's/^dense-per-moe-layer 4/dense-per-moe-layer 5/' -e 's/^routers-per-moe-layer 1/routers-per-moe-layer 0/'
broken fused_partner_untied "v_proj.weight are one GEMM in vLLM (qkv) but would get two global scales" \
    -e '/v_proj/s/ fuse=qkv//'
broken fused_partner_kept "is quantized but .*v_proj.weight, its partner in vLLM's fused qkv GEMM, is kept" \
    -e '/v_proj/d' -e 's/^dense-per-moe-layer 4/dense-per-moe-layer 3/'

# ---- plan --infer on the built-in families' synthetic checkpoints ----
# Derivable: the inferred description plans exactly as the built-in family does.
# gpt-oss (MXFP4 as published, and its bf16 copy) is inferred from the per-expert view the planner
# reads (the MXFP4 blocks decoded, the fused gate/up split as transformers' GptOssExperts does).
# The comparison leaves out the family and its notes: a note is what a family's author knows about
# serving (gpt-oss: vLLM 0.32 cannot load the output), which no checkpoint shows.
for arch in gemma4-dense qwen3-moe qwen2-moe mixtral glm4-moe deepseek-v3 kimi-k2 minimax-m2 glm4.7-flash kimi-k2.5 \
            qwen3-next qwen3.5-dense gpt-oss-20b gpt-oss-20b-bf16; do
    $FF_FAST synth --arch $arch "$W/p-$arch" > /dev/null 2>&1
    $FF plan "$W/p-$arch" --infer > "$W/p-$arch.fam" 2> /dev/null; irc=$?
    strip='import json,sys; j=json.load(open(sys.argv[1])); [j.pop(k) for k in ("family","families","notes")]; print(json.dumps(j))'
    a=$($FF plan "$W/p-$arch" --json 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
    b=$($FF plan "$W/p-$arch" --json --family-file "$W/p-$arch.fam" 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
    if [ $irc -eq 0 ] && grep -q "^# derived" "$W/p-$arch.fam" && [ "$a" = "$b" ]; then
        pass "family_infer_same_plan_$arch"
    else fail "family_infer_same_plan_$arch" "rc=$irc $(grep -m1 derived "$W/p-$arch.fam")"; fi
done
for arch in mixtral kimi-k2.5 gpt-oss-20b gpt-oss-20b-bf16; do
    $FF_FAST quantize "$W/p-$arch" "$W/pq-$arch" --no-doctor --quiet > /dev/null 2>&1
    $FF_FAST quantize "$W/p-$arch" "$W/pf-$arch" --family-file "$W/p-$arch.fam" --no-doctor --quiet > /dev/null 2>&1
    if [ "$(digest "$W/pq-$arch")" = "$(digest "$W/pf-$arch")" ] && cmp -s "$W/pq-$arch/config.json" "$W/pf-$arch/config.json"; then
        pass "family_infer_same_bytes_$arch"; else fail "family_infer_same_bytes_$arch"; fi
done
# NOT derived, but the proposal passed back unedited plans and quantizes as the built-in family: the
# indexer's wk/weights_proj (kept, as vLLM builds them without quant_config) and a fused
# expert layout the shape cannot tell are the only guesses, and both are the built-in's.
# Llama-4's gate_up_proj [E, H, 2I] with 2I == H fits both layouts: its down_proj [E, I, H]
# tells it is transposed (the old proposal took it as [E, 2I, H]: the same plan, other bytes).
for arch in deepseek-v3.2 qwen3.5-moe llama4; do
    $FF_FAST synth --arch $arch "$W/b-$arch" > /dev/null 2>&1
    $FF plan "$W/b-$arch" --infer > "$W/b-$arch.fam" 2> /dev/null; irc=$?
    a=$($FF plan "$W/b-$arch" --json 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
    b=$($FF plan "$W/b-$arch" --json --family-file "$W/b-$arch.fam" 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
    $FF_FAST quantize "$W/b-$arch" "$W/bq-$arch" --no-doctor --quiet > /dev/null 2>&1
    $FF_FAST quantize "$W/b-$arch" "$W/bf-$arch" --family-file "$W/b-$arch.fam" --no-doctor --quiet > /dev/null 2>&1
    if [ $irc -eq 3 ] && grep -q "^# NOT derived" "$W/b-$arch.fam" && [ "$a" = "$b" ] &&
       [ "$(digest "$W/bq-$arch")" = "$(digest "$W/bf-$arch")" ]; then
        pass "family_infer_passed_back_same_plan_$arch" "and the same tensors"
    else fail "family_infer_passed_back_same_plan_$arch" "rc=$irc $(grep -m1 derived "$W/b-$arch.fam")"; fi
done
grep -q "^keep ^mtp\[.\]layers\[.\]\[0-9\]+\[.\]mlp\[.\]experts\[.\]gate_up_proj\$ group=mtp out=gate_proj,up_proj guard=fixed linear$" "$W/b-qwen3.5-moe.fam" &&
    grep -q "^keep \$(L)linear_attn\[.\]in_proj_qkv\[.\]weight\$ group=linear_attn linear$" "$W/b-qwen3.5-moe.fam" &&
    pass family_infer_mtp_head_and_linear_attn_kept || fail family_infer_mtp_head_and_linear_attn_kept "$(grep -m3 'mtp\|linear_attn' "$W/b-qwen3.5-moe.fam" | tr '\n' ' ')"

# The real Gemma-4 fixtures transformers saved: NOT derived (per_layer_* Linears no rule places,
# kept; a fused expert layout the shape cannot tell), but the proposal passed back unedited
# plans, quantizes and verifies as the built-in family: the dense one's full-attention layers
# have no v_proj (attention_k_eq_v), which the proposal says by layer_types.
FXT=${FIXTURES:-$ROOT_SHARED/fixtures}
for m in dense moe; do
    n=gemma4-tiny-$m
    if [ ! -f "$FXT/$n.tar.gz" ]; then echo "SKIP family_infer_fixture_$m (no fixtures)"; continue; fi
    tar xzf "$FXT/$n.tar.gz" -C "$W"
    $FF plan "$W/$n" --infer > "$W/$n.fam" 2> /dev/null; irc=$?
    a=$($FF plan "$W/$n" --json 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
    b=$($FF plan "$W/$n" --json --family-file "$W/$n.fam" 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
    $FF_FAST quantize "$W/$n" "$W/$n-b" --no-doctor --quiet > /dev/null 2>&1
    $FF quantize "$W/$n" "$W/$n-f" --family-file "$W/$n.fam" --no-doctor --quiet > /dev/null 2>&1
    $FF verify "$W/$n-f" --family-file "$W/$n.fam" > "$W/$n.verify" 2>&1; vrc=$?
    if [ $irc -eq 3 ] && grep -q "^# NOT derived" "$W/$n.fam" && [ "$a" = "$b" ] && [ $vrc -eq 0 ] &&
       [ "$(digest "$W/$n-b")" = "$(digest "$W/$n-f")" ] && cmp -s "$W/$n-b/config.json" "$W/$n-f/config.json"; then
        pass "family_infer_fixture_$m" "the proposal passed back: the built-in plan, bytes and a verify PASS"
    else fail "family_infer_fixture_$m" "rc=$irc verify=$vrc $(grep -m1 -i 'fail\|violat' "$W/$n.verify")"; fi
done
if grep -q "^layer-kinds layer_types$" "$W/gemma4-tiny-dense.fam" &&
   grep -q "^dense-per-layer-kind full_attention 6$" "$W/gemma4-tiny-dense.fam"; then
    pass family_infer_layer_kinds "full_attention layers 6 Linears, the others 7 (no v_proj)"
else fail family_infer_layer_kinds "$(grep -A3 '^layers' "$W/gemma4-tiny-dense.fam" | tr '\n' ' ')"; fi

# A kind's count that the tensors do not bear out, and a kinds key the config lacks, are refused.
if [ -f "$W/gemma4-tiny-dense.fam" ]; then
    sed 's/^dense-per-layer-kind full_attention 6$/dense-per-layer-kind full_attention 7/' "$W/gemma4-tiny-dense.fam" > "$W/kind7.fam"
    $FF plan "$W/gemma4-tiny-dense" --family-file "$W/kind7.fam" > "$W/kind7.out" 2>&1; rc=$?
    if [ $rc -eq 3 ] && grep -q "dense Linears quantized: 82, but the config implies 84" "$W/kind7.out"; then
        pass family_file_kind_count_refused "exit 3"; else fail family_file_kind_count_refused "rc=$rc $(grep -m1 -i violat "$W/kind7.out")"; fi
    sed 's/^layer-kinds layer_types$/layer-kinds no_such_key/' "$W/gemma4-tiny-dense.fam" > "$W/kindkey.fam"
    $FF plan "$W/gemma4-tiny-dense" --family-file "$W/kindkey.fam" > "$W/kindkey.out" 2>&1; rc=$?
    if [ $rc -ne 0 ] && [ "$(wc -l < "$W/kindkey.out")" -eq 1 ] &&
       grep -q "no_such_key (layer-kinds) is not a list of the 12 layers' kinds" "$W/kindkey.out"; then
        pass family_file_kinds_key_missing "rc=$rc"; else fail family_file_kinds_key_missing "rc=$rc $(head -c 300 "$W/kindkey.out")"; fi
fi
printf '%s\nquant $(L)q_proj$\nlayer-kinds layer_types\ndense-per-layer-kind full 1\ndense-per-layer-kind full 2\n' "$head" > "$W/kind_twice.fam"
bad kind_twice 8 "layer kind 'full' given twice"
printf '%s\nquant $(L)q_proj$\ndense-per-layer 1\ndense-per-layer-kind full 1\n' "$head" > "$W/kind_no_key.fam"
$FF plan "$W/u" --family-file "$W/kind_no_key.fam" > "$W/kind_no_key.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "kind_no_key.fam: dense-per-layer-kind needs layer-kinds" "$W/kind_no_key.out"; then
    pass family_file_kind_needs_key; else fail family_file_kind_needs_key "rc=$rc $(cat "$W/kind_no_key.out")"; fi

# Kimi-K3: KDA and MLA layers by linear_attn_config.kda_layers (1-based layer numbers), KDA's
# q/k/v/g/f_a/b and MLA's q_a/kv_a/g one fused input GEMM each (vLLM's in_proj_qkvgfab and
# fused_qkv_a_g_proj), the short convolutions kept: NOT derived (the [1, H] res_proj Linears), and
# the proposal passed back gives the built-in plan. Its routed experts' w1/w2/w3 are written under
# llm-compressor's linearized names (as Mixtral's and MiniMax-M2's); the built-in keeps w1/w2/w3
# (llm-compressor's own Kimi-K3 modeling): with those renames taken out, the same bytes.
K3="$W/n-kimi-k3-own"
$FF_FAST synth --arch kimi-k3 "$K3" > /dev/null 2>&1
$FF plan "$K3" --infer > "$K3.fam" 2> /dev/null; irc=$?
a=$($FF plan "$K3" --json 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
b=$($FF plan "$K3" --json --family-file "$K3.fam" 2>&1 | python3 -c "$strip" /dev/stdin 2>&1)
if [ $irc -eq 3 ] && [ "$a" = "$b" ] && grep -q "^layer-kind-numbers linear_attn_config.kda_layers 1 kda other$" "$K3.fam" &&
   grep -q "^quant \$(L)self_attn\[.\]f_a_proj\[.\]weight\$ group=attention fuse=in_proj$" "$K3.fam" &&
   grep -q "^keep \$(L)self_attn\[.\]q_conv1d\[.\]weight\$ group=other$" "$K3.fam"; then
    pass family_infer_kimi_k3_same_plan "KDA/MLA by kda_layers, in_proj tied, conv kept"
else fail family_infer_kimi_k3_same_plan "rc=$irc $(grep -m1 derived "$K3.fam")"; fi
sed -e '/experts\[.\]\[0-9\]+\[.\]\(gate\|up\|down\)_proj/d' -e 's/ out=\(gate\|up\|down\)_proj$//' "$K3.fam" > "$K3-w.fam"
$FF_FAST quantize "$K3" "$K3-b" --no-doctor --quiet > /dev/null 2>&1
$FF quantize "$K3" "$K3-f" --family-file "$K3-w.fam" --no-doctor --quiet > /dev/null 2>&1
$FF verify "$K3-f" --family-file "$K3-w.fam" > "$K3-f.verify" 2>&1; vrc=$?
if [ $vrc -eq 0 ] && cmp -s "$K3-b/model.safetensors" "$K3-f/model.safetensors" && cmp -s "$K3-b/config.json" "$K3-f/config.json"; then
    pass family_infer_kimi_k3_names_kept_same_bytes "and a verify PASS"
else fail family_infer_kimi_k3_names_kept_same_bytes "verify=$vrc $(grep -m1 -i 'fail' "$K3-f.verify")"; fi
# layer-kind-numbers counted from the wrong base: the kinds shift one layer and the counts refuse it;
# a list key the config lacks, and layer kinds given twice, are refused in one line.
sed 's/^layer-kind-numbers linear_attn_config.kda_layers 1 /layer-kind-numbers linear_attn_config.kda_layers 0 /' "$K3.fam" > "$W/k3-base0.fam"
$FF plan "$K3" --family-file "$W/k3-base0.fam" > "$W/k3-base0.out" 2>&1; rc=$?
if [ $rc -eq 3 ] && grep -q "dense Linears quantized: 42, but the config implies" "$W/k3-base0.out"; then
    pass family_file_kind_numbers_wrong_base_refused "exit 3"
else fail family_file_kind_numbers_wrong_base_refused "rc=$rc $(grep -m1 -i 'violat\|:' "$W/k3-base0.out")"; fi
sed 's/^layer-kind-numbers linear_attn_config.kda_layers /layer-kind-numbers linear_attn_config.no_such /' "$K3.fam" > "$W/k3-nokey.fam"
$FF plan "$K3" --family-file "$W/k3-nokey.fam" > "$W/k3-nokey.out" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l < "$W/k3-nokey.out")" -eq 1 ] &&
   grep -q "linear_attn_config.no_such (layer-kind-numbers) is not a list of layer numbers" "$W/k3-nokey.out"; then
    pass family_file_kind_numbers_key_missing "rc=$rc"; else fail family_file_kind_numbers_key_missing "rc=$rc $(head -c 300 "$W/k3-nokey.out")"; fi
# an entry of the list that names no layer (0 in a 1-based list): refused in one line naming it
cp -r "$K3" "$W/k3-bad0"
python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); t=c.get("text_config", c); t["linear_attn_config"]["kda_layers"][0]=0; json.dump(c, open(p, "w"))' "$W/k3-bad0/config.json"
$FF plan "$W/k3-bad0" --family-file "$K3.fam" > "$W/k3-bad0.out" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l < "$W/k3-bad0.out")" -eq 1 ] &&
   grep -q "config.json: text_config.linear_attn_config.kda_layers\[0\] is not a layer number from 1 to 4 (layer-kind-numbers counts from 1)" "$W/k3-bad0.out"; then
    pass family_file_kind_numbers_entry_refused "rc=$rc"; else fail family_file_kind_numbers_entry_refused "rc=$rc $(head -c 300 "$W/k3-bad0.out")"; fi
printf '%s\nquant $(L)q_proj$\nlayer-kinds layer_types\nlayer-kind-numbers a.b 1 x y\n' "$head" > "$W/kinds_both.fam"
bad kinds_both 7 "layer kinds are given twice"

# Not derivable (per-layer-type Linears, indexers, MXFP4 scales, a layout the shape cannot tell,
# gate/up fused with no shape to tell halves from interleaving -- the old build took gpt-oss's
# interleaved bf16 experts for halves and wrote them):
# NOT derived: plan --infer prints what it could and exits 3, and --infer-family refuses
# before writing anything.
# (gpt-oss's bf16 copy under a new model_type is read as stored, fused: the interleaving is
# gpt_oss's to know.)
for arch in gemma4-moe llama4 kimi-k3 deepseek-v3.2 gpt-oss-20b-bf16; do
    $FF_FAST synth --arch $arch "$W/n-$arch" > /dev/null 2>&1
    python3 - "$W/n-$arch/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["model_type"] = "brandnew_" + c["model_type"]
json.dump(c, open(sys.argv[1], "w"))
PY
    $FF plan "$W/n-$arch" --infer > "$W/n-$arch.fam" 2> /dev/null; irc=$?
    $FF quantize "$W/n-$arch" "$W/nq-$arch" --infer-family --no-doctor --quiet > "$W/n-$arch.out" 2>&1; rc=$?
    if grep -q "^# NOT derived: " "$W/n-$arch.fam" && [ $irc -eq 3 ] && [ $rc -eq 3 ] && [ ! -e "$W/nq-$arch" ] &&
       grep -q "the description cannot be derived" "$W/n-$arch.out"; then
        pass "family_infer_refuses_$arch" "$(grep -m1 -o 'NOT derived: .\{0,60\}' "$W/n-$arch.fam")"
    else fail "family_infer_refuses_$arch" "rc=$rc $(head -c 200 "$W/n-$arch.out")"; fi
done
# gpt-oss's MXFP4 layout under a new model_type: quant_method mxfp4 is transformers' Mxfp4Config,
# whose only experts are GptOssExperts, so the planner reads any such source per expert and
# --infer-family derives it; its quantized tensors are the built-in gpt_oss family's.
$FF_FAST synth --arch gpt-oss-20b "$W/mx-new" > /dev/null 2>&1
sed -i 's/"model_type": "gpt_oss"/"model_type": "brandnew_gpt_oss"/' "$W/mx-new/config.json"
$FF_FAST quantize "$W/p-gpt-oss-20b" "$W/mx-builtin" --no-doctor --quiet > /dev/null 2>&1
$FF quantize "$W/mx-new" "$W/mx-new-q" --infer-family --no-doctor --quiet > "$W/mx-new.out" 2>&1; rc=$?
if [ $rc -eq 0 ] &&
   cmp -s "$W/mx-new-q/model.safetensors" "$W/mx-builtin/model.safetensors"; then
    pass family_infer_mxfp4_new_model_type "derived from the per-expert view; model.safetensors equal to gpt_oss's"
else fail family_infer_mxfp4_new_model_type "rc=$rc $(tail -1 "$W/mx-new.out")"; fi

# The description the refusal asks for: gpt-oss's bf16 copy under a new model_type, its inferred
# text with layout=fused2i-t (gate/up interleaved): the quantized tensors are the built-in gpt_oss
# family's byte for byte; the proposed halves (fused2-t) give other bytes, which is why no guess
# is taken.
W16="$W/n-gpt-oss-20b-bf16"
sed -e 's/layout=fused2-t/layout=fused2i-t/' "$W16.fam" > "$W/oss-i.fam"
$FF_FAST synth --arch gpt-oss-20b-bf16 "$W/oss16" > /dev/null 2>&1
$FF_FAST quantize "$W/oss16" "$W/oss16-q" --no-doctor --quiet > /dev/null 2>&1
$FF quantize "$W16" "$W/oss16-i" --family-file "$W/oss-i.fam" --no-doctor --quiet > "$W/oss16-i.out" 2>&1; rc=$?
$FF_FAST quantize "$W16" "$W/oss16-h" --family-file "$W16.fam" --no-doctor --quiet > /dev/null 2>&1
quant_same='import json,struct,sys
def ld(p):
    b=open(p+"/model.safetensors","rb").read(); n=struct.unpack("<Q",b[:8])[0]; return json.loads(b[8:8+n]), b[8+n:]
(ha,da),(hb,db)=ld(sys.argv[1]),ld(sys.argv[2])
cut=lambda h,d,k: d[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]
q=[k for k in hb if k.endswith(("weight_packed","weight_scale","weight_global_scale"))]
print(len(q), sum(k in ha and cut(ha,da,k)==cut(hb,db,k) for k in q))'
got=$(python3 -c "$quant_same" "$W/oss16-i" "$W/oss16-q" 2>&1); halves=$(python3 -c "$quant_same" "$W/oss16-h" "$W/oss16-q" 2>&1)
if [ "$rc" -eq 0 ] && [ "$got" = "96 96" ] && [ "${halves#96 }" != 96 ]; then
    pass "family_file_fused2i_t_equals_gpt_oss" "96/96 quantized tensors equal; halves: ${halves#96 } of 96"
else fail "family_file_fused2i_t_equals_gpt_oss" "rc=$rc interleaved '$got' halves '$halves' $(tail -1 "$W/oss16-i.out")"; fi
exit $GOLDEN_RC

#!/usr/bin/env bash
# Core: synth -> plan -> quantize, the 26B-A4B counts, refused recipes, bad input.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/core; rm -rf "$W"; mkdir -p "$W"

# every command answers --help
for c in synth plan quantize inspect verify diff doctor merge fit probe dequantize; do
    if $FF "$c" --help > "$W/help-$c.txt" 2>&1 && grep -q "^usage: fp4forge $c" "$W/help-$c.txt"; then
        pass "help_$c"; else fail "help_$c"; fi
done

# the embedded default end to end
$FF synth "$W/tiny" > /dev/null && $FF quantize --quiet "$W/tiny" "$W/tiny-q" > "$W/q.out" 2>&1
if grep -q '"quant_method": "compressed-tensors"' "$W/tiny-q/config.json" 2>/dev/null &&
   [ -f "$W/tiny-q/chat_template.jinja" ] && [ -f "$W/tiny-q/processor_config.json" ]; then
    pass quantize_tiny_default "$(grep quantized "$W/q.out" | head -1 | xargs)"
else fail quantize_tiny_default; fi

# plan golden: the real 26B-A4B counts (30 layers x 128 experts), widths shrunk
$FF_FAST synth --arch gemma4-moe --size real --hidden 64 --intermediate 64 --moe-intermediate 32 \
    --vocab 256 --head-dim 16 --global-head-dim 32 --vision-layers 2 --vision-hidden 32 \
    --vision-intermediate 32 "$W/a4b" > /dev/null
$FF plan "$W/a4b" > "$W/plan.txt"; prc=$?
if [ $prc -eq 0 ] && grep -q "^  dense Linears quantized   205 (config implies 205)$" "$W/plan.txt" &&
   grep -q "^  expert Linears quantized  11520 (config implies 11520)$" "$W/plan.txt" &&
   grep -q "^  routers ignored           30, quantized 0$" "$W/plan.txt"; then
    pass plan_26b_a4b_counts "11520 experts, 205 dense, 30 routers ignored"
else fail plan_26b_a4b_counts "rc=$prc"; fi
$FF plan --json "$W/a4b" > "$W/plan.json"
if python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(not (j['quantized_experts']==11520 and j['quantized_dense']==205 and j['routers_ignored']==30 and j['ok']))" "$W/plan.json"; then
    pass plan_json; else fail plan_json; fi
# the full-size 26B-A4B (51.6 GB of headers, sparse: no disk used): plan reads
# headers only and must answer in well under a second
$FF_FAST synth --arch gemma4-moe --size real --sparse "$W/a4b-full" > /dev/null
t0=$(date +%s.%N); $FF_FAST plan "$W/a4b-full" > "$W/plan-full.txt"; prc=$?; t1=$(date +%s.%N)
secs=$(echo "$t1 - $t0" | bc)
if [ $prc -eq 0 ] && grep -q "expert Linears quantized  11520" "$W/plan-full.txt" && [ "$(echo "$secs < 1" | bc)" = 1 ]; then
    pass plan_full_size_26b_a4b_headers "$(grep '^total' "$W/plan-full.txt" | xargs) in ${secs}s"
else fail plan_full_size_26b_a4b_headers "rc=$prc ${secs}s"; fi

# real 31B dense layer pattern: 60 layers, full every 6th without v_proj -> 410 Linears
$FF_FAST synth --size real --hidden 64 --intermediate 64 --vocab 256 --head-dim 16 --global-head-dim 32 \
    --vision-layers 0 "$W/d31" > /dev/null
if $FF plan "$W/d31" | grep -q "^  dense Linears quantized   410 (config implies 410)$"; then
    pass plan_31b_dense_counts 410; else fail plan_31b_dense_counts; fi

# recipes that break an invariant are refused before any work: exit 3, nothing written
expect_rc plan_refuses_router 3 $FF plan "$W/a4b" --only 'language_model.*(self_attn|mlp|experts|router)'
grep -q "quantizes a router" "$WORK/plan_refuses_router.out" || fail plan_refuses_router_message
expect_rc plan_refuses_missing_experts 3 $FF plan "$W/a4b" --ignore 'experts'
grep -q "expert Linears quantized: 0, but the config implies 11520" "$WORK/plan_refuses_missing_experts.out" ||
    fail plan_refuses_missing_experts_message
expect_rc plan_refuses_vision 3 $FF plan "$W/a4b" --only 'vision_tower|self_attn|mlp|experts'
expect_rc quantize_refuses_router 3 $FF quantize --quiet "$W/a4b" "$W/never" --only 'language_model.*(self_attn|mlp|experts|router)'
if [ ! -e "$W/never" ] && ! ls -d "$W"/never.partial-* > /dev/null 2>&1; then pass refused_writes_nothing; else fail refused_writes_nothing; fi
expect_rc plan_bad_regex_is_usage 2 $FF plan "$W/a4b" --ignore vision --only '('
expect_rc plan_allows_router_when_asked 0 $FF plan "$W/a4b" --only 'language_model.*(self_attn|mlp|experts|router)' --allow-router-quantization
grep -q "WARNING .*router quantized on request" "$WORK/plan_allows_router_when_asked.out" || fail plan_router_warning

# sharding: small shards, an index that names every tensor
$FF quantize --quiet --shard-size 300KB "$W/tiny" "$W/tiny-shards" > /dev/null 2>&1
n=$(ls "$W/tiny-shards"/model-*-of-*.safetensors 2>/dev/null | wc -l)
if [ "$n" -gt 3 ] && python3 - "$W/tiny-shards" <<'PY'
import json, os, struct, sys
d = sys.argv[1]; idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
seen = {}
for f in set(idx.values()):
    b = open(os.path.join(d, f), "rb"); n = struct.unpack("<Q", b.read(8))[0]
    for k in json.loads(b.read(n)):
        if k != "__metadata__": seen[k] = f
sys.exit(0 if seen == idx else 1)
PY
then pass shards_and_index "$n shards"; else fail shards_and_index "$n shards"; fi
if cmp -s <(cd "$W/tiny-q" && ls) <(cd "$W/tiny-q" && ls) && [ -f "$W/tiny-q/model.safetensors" ]; then pass single_shard_no_index; else fail single_shard_no_index; fi

# bad input: one-line error naming file (and tensor), non-zero exit, no output left
read -r nanq nankept <<< "$(python3 tests/golden/mkbad.py "$W/tiny" "$W/bad")"
for v in truncated header-lies overlap bad-json nan-weight nan-kept numel-overflow overlap-empty; do
    $FF quantize --quiet "$W/bad/$v" "$W/bad-out-$v" > "$W/bad-$v.out" 2>&1; rc=$?
    lines=$(wc -l < "$W/bad-$v.out")
    if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -q "$W/bad/$v/model.safetensors" "$W/bad-$v.out" &&
       [ ! -e "$W/bad-out-$v" ] && ! ls -d "$W/bad-out-$v".partial-* > /dev/null 2>&1; then
        pass "bad_input_$v" "$(cut -c1-150 "$W/bad-$v.out")"
    else fail "bad_input_$v" "rc=$rc lines=$lines: $(head -2 "$W/bad-$v.out")"; fi
done
grep -q "tensor $nanq: element 1 is NaN" "$W/bad-nan-weight.out" && pass nan_names_tensor || fail nan_names_tensor
grep -q "tensor $nankept: element 2 is NaN or infinite" "$W/bad-nan-kept.out" && pass nan_in_kept_tensor_names_it || fail nan_in_kept_tensor_names_it
# a kept tensor of several 4 MB chunks (checked in parallel): the first
# non-finite element is named, an Inf in chunk 2 before a NaN in chunk 3
$FF synth --layers 1 --hidden 1024 --intermediate 128 --heads 2 --kv-heads 1 --head-dim 32 --vocab 8192 \
    "$W/bigkept" > /dev/null
python3 - "$W/bigkept/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))["model.language_model.embed_tokens.weight"]
    for elem, bits in ((5000001, 0x7f80), (7000000, 0x7fc1)):
        f.seek(8 + n + t["data_offsets"][0] + 2 * elem)
        f.write(struct.pack("<H", bits))
PY
$FF quantize --quiet "$W/bigkept" "$W/bigkept-out" > "$W/bigkept.out" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l < "$W/bigkept.out")" -eq 1 ] && [ ! -e "$W/bigkept-out" ] &&
   grep -q "embed_tokens.weight: element 5000001 is NaN or infinite" "$W/bigkept.out"; then
    pass inf_in_chunked_kept_tensor_names_first "$(cut -c1-150 "$W/bigkept.out")"
else fail inf_in_chunked_kept_tensor_names_first "rc=$rc: $(head -2 "$W/bigkept.out")"; fi
# a NaN in a unit whose amax pass rides along with the previous unit's
# quantizing pass (gate+up with o_proj): named the same, nothing written
$FF synth --layers 1 --hidden 1024 --intermediate 1024 --heads 8 --kv-heads 2 --head-dim 128 --vocab 1024 \
    "$W/sidenan" > /dev/null
python3 - "$W/sidenan/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))["model.language_model.layers.0.mlp.up_proj.weight"]
    f.seek(8 + n + t["data_offsets"][0] + 2 * 123457)
    f.write(struct.pack("<H", 0xffc1))
PY
$FF quantize --quiet "$W/sidenan" "$W/sidenan-out" > "$W/sidenan.out" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l < "$W/sidenan.out")" -eq 1 ] && [ ! -e "$W/sidenan-out" ] &&
   grep -q "up_proj.weight: element 123457 is NaN or Inf" "$W/sidenan.out"; then
    pass nan_in_riding_unit_names_it "$(cut -c1-150 "$W/sidenan.out")"
else fail nan_in_riding_unit_names_it "rc=$rc: $(head -2 "$W/sidenan.out")"; fi
grep -q "overflow a 64-bit byte count" "$W/bad-numel-overflow.out" && pass numel_overflow_refused || fail numel_overflow_refused
grep -q "overlaps tensor" "$W/bad-overlap-empty.out" && pass overlap_hidden_by_empty_refused || fail overlap_hidden_by_empty_refused
# verify flags a NaN planted in a kept tensor of a finished output
cp -r "$W/tiny-q" "$W/tiny-q-nan"
python3 - "$W/tiny-q-nan/model.safetensors" "$nankept" <<'PY'
import json, struct, sys
p, name = sys.argv[1], sys.argv[2]
b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
s = json.loads(b[8:8 + n])[name]["data_offsets"][0] + 8 + n
b[s:s + 2] = b"\xc0\x7f"
open(p, "wb").write(b)
PY
$FF verify "$W/tiny-q-nan" > "$W/verify-nan.out" 2>&1; rc=$?
[ $rc -eq 6 ] && grep -q "FAIL kept_finite" "$W/verify-nan.out" && pass verify_nan_in_kept_tensor "rc=$rc" || fail verify_nan_in_kept_tensor "rc=$rc"
# inspect on a shard that holds no tensors (memcpy from NULL was undefined)
mkdir -p "$W/empty-shard" && cp "$W/tiny/config.json" "$W/empty-shard/"
python3 -c 'import struct,sys; h=b"{}      "; open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h)' "$W/empty-shard/model.safetensors"
expect_rc inspect_empty_shard 0 $FF inspect "$W/empty-shard"
expect_rc refuses_existing_output 1 $FF quantize --quiet "$W/tiny" "$W/tiny-q"
expect_rc refuses_missing_input 1 $FF quantize --quiet "$W/does-not-exist" "$W/x"
expect_rc refuses_bad_option 2 $FF quantize --frobnicate "$W/tiny" "$W/x"
# numeric options are parsed strictly: a typo is a usage error, never "all cores" or a cast of NaN
for bad in "--threads abc" "--threads -1" "--threads 1000000" "--threads 2x" "--shard-size nan" "--shard-size inf" \
           "--shard-size 1e30" "--shard-size -5GB"; do
    name=$(echo "$bad" | tr -c 'a-z0-9\n' '_')
    expect_rc "strict_option$name" 2 $FF quantize $bad "$W/tiny" "$W/x"
done
expect_rc strict_option_synth_layers 2 $FF synth --layers -3 "$W/x"
expect_rc strict_option_fit_context 2 $FF fit "$W/tiny" --context 1e3
expect_rc strict_option_probe_timeout 2 $FF probe http://127.0.0.1:9 --timeout nan
# 0.4 ms was 0 ms for curl, which is no limit at all (issue 35, H4)
expect_rc strict_option_probe_timeout_sub_ms 2 timeout 20 $FF probe http://127.0.0.1:9 --timeout 0.0004

# the real tiny Gemma-4s saved by transformers 5.17: they lack processor files,
# so quantize refuses (exit 4) until --fix gets them from a same-family folder
mkdir -p "$W/fx"
for m in dense moe; do tar xzf "$ROOT_SHARED/fixtures/gemma4-tiny-$m.tar.gz" -C "$W/fx"; done
expect_rc quantize_fixture_refused_by_doctor 4 $FF quantize --quiet "$W/fx/gemma4-tiny-dense" "$W/fx-q-dense"
[ ! -e "$W/fx-q-dense" ] && pass doctor_refusal_writes_nothing || fail doctor_refusal_writes_nothing
$FF_FAST synth --vocab 512 --vision-layers 1 "$W/aux512" > /dev/null
before=$(cd "$W/fx/gemma4-tiny-dense" && ls -la --time-style=+%s | md5sum)
expect_rc quantize_fixture_dense_fix 0 $FF quantize --quiet --fix --aux-from "$W/aux512" "$W/fx/gemma4-tiny-dense" "$W/fx-q-dense"
after=$(cd "$W/fx/gemma4-tiny-dense" && ls -la --time-style=+%s | md5sum)
[ "$before" = "$after" ] && pass fix_never_writes_input || fail fix_never_writes_input
if [ -f "$W/fx-q-dense/processor_config.json" ] && $FF doctor "$W/fx-q-dense" > /dev/null &&
   ! ls -d "$W"/fx-q-dense.doctor-* > /dev/null 2>&1; then pass fixed_output_clean; else fail fixed_output_clean; fi
expect_rc quantize_fixture_moe_no_doctor 0 $FF quantize --quiet --no-doctor "$W/fx/gemma4-tiny-moe" "$W/fx-q-moe"
expect_rc output_doctor_clean 0 $FF doctor "$W/tiny-q"
exit $GOLDEN_RC

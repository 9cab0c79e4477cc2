#!/usr/bin/env bash
# Golden tests for `fp4forge fit` on the real tiny Gemma-4 checkpoints:
# KV bytes per token hand-computed from their configs, KV at a context equal
# to what vLLM 0.32 (CPU build) allocated for the same models, weights equal
# to the tensor table and to the plan, the verdict's edges and exit codes.
set -u
FF=${FF:-build/fp4forge-san}
WORK=${WORK:-build/golden-work}
FIX=${FIXTURES:-/work/shared/fixtures}
D=$WORK/fit
rm -rf "$D"; mkdir -p "$D"
ok() { echo "PASS fit_$1"; }
no() { echo "FAIL fit_$1${2:+ ($2)}"; }
eq() { if [ "$2" = "$3" ]; then ok "$1"; else no "$1" "got $2, want $3"; fi; }
[ -f "$FIX/gemma4-tiny-dense.tar.gz" ] || { echo "SKIP fit_all (no fixtures)"; exit 0; }
tar xzf "$FIX/gemma4-tiny-dense.tar.gz" -C "$D" && tar xzf "$FIX/gemma4-tiny-moe.tar.gz" -C "$D"
DN=$D/gemma4-tiny-dense MO=$D/gemma4-tiny-moe
jq_() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
fit() { local out=$1; shift; "$FF" fit "$@" --json > "$out" 2> "$out.err"; echo $? > "$out.rc"; }

# dense: 10 sliding layers x 2 (K,V) x 2 heads x 16 x 2 B = 1280; 2 full
# (k_eq_v, per_layer_config 1 head x 32) x 2 x 1 x 32 x 2 = 256
fit "$D/d.json" "$DN" --context 4096
eq dense_kv_per_token "$(jq_ "$D/d.json" "j['kv_full_per_token'] + j['kv_sliding_per_token']")" 1536
eq dense_full_per_token "$(jq_ "$D/d.json" "j['kv_full_per_token']")" 256
# moe: no k_eq_v, full layers 2 heads x 32: 2 x 2 x 2 x 32 x 2 = 512; sliding 1280
fit "$D/m.json" "$MO" --context 4096
eq moe_kv_per_token "$(jq_ "$D/m.json" "j['kv_full_per_token'] + j['kv_sliding_per_token']")" 1792
# fp8 halves it
fit "$D/d8.json" "$DN" --context 4096 --kv-dtype fp8
eq dense_fp8_half "$(jq_ "$D/d8.json" "j['kv_full_per_token'] + j['kv_sliding_per_token']")" 768
# --k-eq-v-single: the two full layers keep one tensor: 1280 + 128
fit "$D/d1.json" "$DN" --context 4096 --k-eq-v-single
eq dense_k_eq_v_single "$(jq_ "$D/d1.json" "j['kv_full_per_token'] + j['kv_sliding_per_token']")" 1408

# vLLM 0.32 CPU, max_model_len 4096, 1 GiB KV, 128-token blocks, reported
# "Maximum concurrency for 4,096 tokens per request": dense 166.34x, moe
# 140.03x, dense fp8 332.67x. Same bytes per request here:
fit "$D/dv.json" "$DN" --context 4096 --block-size 128
eq vllm_dense_request_bytes "$(jq_ "$D/dv.json" "j['kv_bytes']")" 6455296
eq vllm_dense_concurrency "$(jq_ "$D/dv.json" "'%.2f' % (2**30 / j['kv_bytes'])")" 166.34
fit "$D/mv.json" "$MO" --context 4096 --block-size 128
eq vllm_moe_request_bytes "$(jq_ "$D/mv.json" "j['kv_bytes']")" 7667712
eq vllm_moe_concurrency "$(jq_ "$D/mv.json" "'%.2f' % (2**30 / j['kv_bytes'])")" 140.03
fit "$D/dv8.json" "$DN" --context 4096 --block-size 128 --kv-dtype fp8
eq vllm_dense_fp8_concurrency "$(jq_ "$D/dv8.json" "'%.2f' % (2**30 / j['kv_bytes'])")" 332.67

# weights: the bf16 column is the tensor table's bytes; the NVFP4A16 one is
# what plan says quantize would write
tbl=$(python3 - "$DN/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb"); n = struct.unpack("<Q", b.read(8))[0]; h = json.loads(b.read(n))
print(sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k != "__metadata__"))
PY
)
eq bf16_weights_table "$(jq_ "$D/d.json" "j['columns'][0]['weights_by_kind']['total']")" "$tbl"
"$FF" plan "$DN" --json > "$D/plan.json" 2>/dev/null
eq nvfp4_weights_plan "$(jq_ "$D/d.json" "j['columns'][1]['weights_by_kind']['total']")" "$(jq_ "$D/plan.json" "j['bytes_out']")"
# a quantized input is measured as is: one column, the table's bytes
if "${FF_FAST:-build/fp4forge}" quantize --no-doctor "$DN" "$D/q" >/dev/null 2>&1; then
    fit "$D/q.json" "$D/q" --context 4096
    qt=$(python3 -c "
import json,struct,glob,sys
t=0
for p in glob.glob(sys.argv[1]+'/*.safetensors'):
    b=open(p,'rb'); n=struct.unpack('<Q',b.read(8))[0]; h=json.loads(b.read(n))
    t+=sum(v['data_offsets'][1]-v['data_offsets'][0] for k,v in h.items() if k!='__metadata__')
print(t)" "$D/q")
    eq quantized_as_given "$(jq_ "$D/q.json" "(len(j['columns']), j['columns'][0]['label'], j['columns'][0]['weights_by_kind']['total'])")" "(1, 'as given', $qt)"
else
    no quantized_as_given "quantize failed"
fi

# verdict edges: the reported max context fits, one more token does not
fit "$D/b.json" "$DN" --context 100000 --gpu-free 1.02GiB --text-only
mc=$(jq_ "$D/b.json" "j['columns'][1]['max_context']")
fit "$D/b1.json" "$DN" --context "$mc" --gpu-free 1.02GiB --text-only
fit "$D/b2.json" "$DN" --context $((mc + 1)) --gpu-free 1.02GiB --text-only
eq max_context_fits "$(jq_ "$D/b1.json" "j['columns'][1]['fits']"):$(cat "$D/b1.json.rc")" True:0
eq max_context_plus_one "$(jq_ "$D/b2.json" "j['columns'][1]['fits']"):$(cat "$D/b2.json.rc")" False:1
# the issue's admission check: 0.20 x 96 GiB = 19.2 GiB wanted, 18.26 free
fit "$D/a.json" "$DN" --context 4096 --gpu-total 96GiB --utilization 0.2 --gpu-free 18.26GiB
eq admission_refused "$(jq_ "$D/a.json" "j['admission_refused']"):$(cat "$D/a.json.rc")" True:1
eq utilization_needed "$(jq_ "$D/a.json" "'%.4f' % (j['columns'][1]['need'] / (96 * 2**30))")" \
   "$(jq_ "$D/a.json" "'%.4f' % j['columns'][1]['utilization_needed']")"
# usage errors exit 2
"$FF" fit "$DN" --kv-dtype fp16 >/dev/null 2>&1; eq bad_kv_dtype $? 2
"$FF" fit "$DN" --utilization 0.2 >/dev/null 2>&1; eq utilization_needs_total $? 2
# text output names every layer kind
"$FF" fit "$DN" --context 4096 > "$D/t.txt" 2>&1
if grep -q "sliding" "$D/t.txt" && grep -q "full" "$D/t.txt" && grep -q "nvfp4a16" "$D/t.txt"; then ok text_report; else no text_report; fi
exit 0

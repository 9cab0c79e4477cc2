#!/usr/bin/env bash
# --budget SIZE and --fit (issue 40, item 3) on the synthetic Gemma-4 dense and Qwen3-MoE
# checkpoints: refusals before any work (a budget below the all-NVFP4A16 output names the
# smallest size; one that holds the unquantized weights says so, and quantize writes nothing;
# --budget with --fit, seat options without --fit, a quantized source), the choice (within
# the budget, FP8 units chosen, whole fused units, the same at 1 and 2 threads, sizes with
# units), what quantize writes (its tensor bytes == the plan's prediction, the FP8 group and
# the kept units in quantization_config, the card's scheme table, verify --against passes),
# MoE experts left NVFP4 with the invariants intact, and --fit's budget honoured by fit.
# Per-unit KL on the real model and llm-compressor's bytes: bench/sensitivity_kl.py,
# tests/conformance/t_mixed.sh.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/budget; rm -rf "$W"; mkdir -p "$W"
$FF_FAST synth "$W/dense" > /dev/null 2>&1 || fail budget_synth_dense
$FF_FAST synth --arch qwen3-moe "$W/qmoe" > /dev/null 2>&1 || fail budget_synth_qwen3_moe
$FF_FAST synth --arch deepseek-v3 --source fp8-block "$W/fp8src" > /dev/null 2>&1 || fail budget_synth_fp8_source

field() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

# refuse NAME RC WANT CMD...: exit RC, one stderr line holding WANT, nothing written to $W/out-NAME
refuse() {
    local name=$1 want_rc=$2 want=$3; shift 3
    "$@" > "$W/$name.stdout" 2> "$W/$name.err"
    local rc=$? lines; lines=$(wc -l < "$W/$name.err")
    local left; left=$(ls -d "$W/out-$name" "$W/out-$name".partial-* 2>/dev/null | wc -l)
    if [ $rc -eq "$want_rc" ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$W/$name.err" && [ "$left" -eq 0 ]; then
        pass "$name" "exit $rc, nothing written: $(cut -c1-160 "$W/$name.err")"
    else
        fail "$name" "rc=$rc, $lines stderr lines, $left outputs left: $(head -2 "$W/$name.err" | tr '\n' ' ' | cut -c1-200)"
    fi
}

$FF plan "$W/dense" --json > "$W/base.json" || fail budget_base_plan
floor=$(field "$W/base.json" 'j["bytes_out"]'); src=$(field "$W/base.json" 'j["bytes_in"]')
refuse budget_below_floor_plan 3 "is below the smallest output this recipe makes: $floor bytes" \
    $FF plan "$W/dense" --budget $((floor - 1))
refuse budget_below_floor 3 "is below the smallest output this recipe makes: $floor bytes" \
    $FF quantize "$W/dense" "$W/out-budget_below_floor" --no-doctor --quiet --budget $((floor - 1))
refuse budget_holds_source 2 "holds the unquantized weights ($src bytes): nothing needs quantizing" \
    $FF quantize "$W/dense" "$W/out-budget_holds_source" --no-doctor --quiet --budget "$src"
$FF plan "$W/dense" --budget "$src" > "$W/holds.txt" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "the unquantized weights fit: nothing needs quantizing" "$W/holds.txt"; then
    pass budget_plan_says_source_fits "exit 0"
else fail budget_plan_says_source_fits "rc=$rc $(tail -2 "$W/holds.txt" | tr '\n' ' ')"; fi
refuse budget_and_fit 2 "--budget and --fit both give the budget: pass one" \
    $FF plan "$W/dense" --budget 1GB --fit --gpu-free 1GB
refuse budget_seat_without_fit 2 "the seat's options (--gpu-free, --context, ...) take --fit" \
    $FF plan "$W/dense" --budget 1GB --gpu-free 1GB
refuse budget_fit_without_seat 2 "--fit needs the seat: --gpu-free, or --gpu-total" $FF plan "$W/dense" --fit
refuse budget_bad_size 2 "--budget" $FF plan "$W/dense" --budget 12parsecs
refuse budget_quantized_source 2 "--budget measures bf16, f16 or f32 weights; this checkpoint is a quantized source" \
    $FF plan "$W/fp8src" --budget 1TB

# a budget halfway between all-NVFP4A16 and the source
mid=$(( (floor + src) / 2 ))
$FF plan "$W/dense" --budget $mid --json --threads 2 > "$W/mid.json" 2> "$W/mid.err" || fail budget_plan_mid "$(head -1 "$W/mid.err")"
$FF plan "$W/dense" --budget $mid --json --threads 1 > "$W/mid1.json" 2>&1
got=$(field "$W/mid.json" '(j["budget"]["chosen"] <= j["budget"]["bytes"], j["budget"]["chosen"] == j["bytes_out"], j["budget"]["fp8_units"] > 0, j["quantized_fp8"] > 0, j["ok"])')
if [ "$got" = "(True, True, True, True, True)" ] && cmp -s "$W/mid.json" "$W/mid1.json"; then
    pass budget_plan_choice "$(field "$W/mid.json" '"chosen %d of %d bytes: %d FP8 units, %d kept" % (j["budget"]["chosen"], j["budget"]["bytes"], j["budget"]["fp8_units"], j["budget"]["kept_units"])'); threads 1 == 2"
else fail budget_plan_choice "$got; $(cmp "$W/mid.json" "$W/mid1.json")"; fi
$FF plan "$W/dense" --budget "$(python3 -c "print($mid/1048576)")MiB" --json > "$W/mib.json" 2>&1
if [ "$(field "$W/mib.json" 'j["budget"]["chosen"]')" = "$(field "$W/mid.json" 'j["budget"]["chosen"]')" ]; then
    pass budget_size_units "MiB"; else fail budget_size_units "$(tail -1 "$W/mib.json")"; fi

$FF quantize "$W/dense" "$W/q" --budget $mid --no-doctor --quiet > "$W/q.log" 2>&1 || fail budget_quantize "$(tail -1 "$W/q.log")"
got=$(python3 - "$W/q" "$W/mid.json" <<'EOF'
import glob, json, struct, sys
q, plan = sys.argv[1], json.load(open(sys.argv[2]))
n = 0
for f in glob.glob(q + "/*.safetensors"):
    h = json.loads(open(f, "rb").read(8 + struct.unpack("<Q", open(f, "rb").read(8))[0])[8:])
    n += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k != "__metadata__")
qc = json.load(open(q + "/config.json"))["quantization_config"]
fp8 = [g for g in qc["config_groups"].values() if g["weights"]["num_bits"] == 8]
kept = [u for u in plan["budget"]["units"] if u["scheme"] == "kept"]
ign = set(qc["ignore"])
kept_ok = all(u["module"].split("+")[0] in ign for u in kept)
card = open(q + "/README.md").read()
print(n == plan["budget"]["chosen"], len(fp8) == 1, kept_ok, "Chosen for a weight budget" in card)
EOF
)
if [ "$got" = "True True True True" ]; then pass budget_quantize_writes_the_plan "tensor bytes == predicted, FP8 group, kept units ignored, card"
else fail budget_quantize_writes_the_plan "$got"; fi
if $FF verify "$W/q" --against "$W/dense" > "$W/verify.log" 2>&1; then pass budget_verify_against
else fail budget_verify_against "$(grep -m2 FAIL "$W/verify.log" | tr '\n' ' ' | cut -c1-200)"; fi

# MoE: the experts stay NVFP4A16 and the invariants hold; only dense units are upgraded
$FF plan "$W/qmoe" --json > "$W/qbase.json"
qsrc=$(field "$W/qbase.json" 'j["bytes_in"]')
$FF plan "$W/qmoe" --budget $((qsrc - 1)) --json > "$W/qmoe.json" 2> "$W/qmoe.err"
got=$(field "$W/qmoe.json" '(j["ok"], j["quantized_experts"] == j["expected_experts"], all("experts" not in u["module"] for u in j["budget"]["units"]), j["budget"]["kept_units"] == len(j["budget"]["units"]))')
if [ "$got" = "(True, True, True, True)" ]; then pass budget_moe_experts_stay_nvfp4 "every dense unit kept, experts NVFP4A16"
else fail budget_moe_experts_stay_nvfp4 "$got $(head -1 "$W/qmoe.err")"; fi

# --fit: the budget is what the seat leaves after KV and reserves; fit agrees on the output
$FF fit "$W/dense" --json --gpu-free 1GiB --context 4096 > "$W/fit-src.json"
claims=$(field "$W/fit-src.json" 'j["kv_bytes"] + j["activation_reserve"] + j["encoder_reserve"]')
gpu=$((mid + claims))
$FF quantize "$W/dense" "$W/qfit" --fit --gpu-free "$gpu" --context 4096 --no-doctor --quiet > "$W/qfit.log" 2>&1 \
    || fail budget_fit_quantize "$(tail -1 "$W/qfit.log")"
$FF fit "$W/qfit" --gpu-free "$gpu" --context 4096 > "$W/fit-out.txt" 2>&1; rc=$?
if [ $rc -eq 0 ]; then pass budget_fit_agrees "fit exit 0 at --gpu-free $gpu --context 4096"
else fail budget_fit_agrees "rc=$rc $(grep -i -m2 'fit\|need' "$W/fit-out.txt" | tr '\n' ' ')"; fi
refuse budget_fit_too_small 3 "no weights fit" $FF plan "$W/dense" --fit --gpu-free 1MB --context 4096
exit $GOLDEN_RC

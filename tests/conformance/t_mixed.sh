#!/usr/bin/env bash
# Conformance (issue 40, item 1): mixed output chosen by the user, `quantize --fp8 self_attn
# --ignore <one down_proj> --allow-partial` (attention FP8 weight-only channel-wise, the MLP
# NVFP4A16, one down_proj bf16), on a tiny random Llama (make_tiny_llama.py) and on the real
# tiny Gemma-4 dense fixture (attention_k_eq_v: its full layers have no v_proj), and the tiny
# Llama with every quantized Linear FP8 (one config group, format naive-quantized) and, with edge
# rows crafted into its attention weights, in bfloat16, float16 and float32 (t_mixed.py craft; the
# FP8 scale is written in the weight's dtype), judged by:
# - t_mixed.py llmc + compare: llm-compressor 0.14's data-free oneshot with the same two config
#   groups (NVFP4A16 on Linear, FP8 on fp4forge's targets, which must resolve to the Linears the
#   regex names): every tensor byte-identical, quantization_config equal (ignore as a set);
# - --threads 1 vs 2 byte identity;
# - hf_load_kl.py: transformers + compressed-tensors load it with no warning and no missing key,
#   logits equal to llm-compressor's output's, KL vs bf16 under the NVFP4 thresholds;
# - vllm_mixed.py: vLLM 0.32's CPU loader (fp4forge's TEST plugin, tests/vllm, now also
#   standing in for the FP8 weight-only GEMM vLLM's CPU build lacks) on vllm_make_models.py's
#   Llama and Gemma-4 dense (head sizes vLLM's CPU attention takes): vLLM picks
#   CompressedTensorsW8A16Fp8 and W4A4Fp4(a16) per group, logprobs equal to vLLM on the copy
#   compressed-tensors' decompressors make (t_mixed.py dequant); unpatched, vLLM CPU refuses;
#   and a --budget output of the same Llama (FP8, NVFP4A16 and kept units in one model).
# - the checking commands (checks below): verify and verify --against the source pass; fp4forge
#   dequantize equals compressed-tensors' own decompression of the whole model, byte for byte.
# FP4FORGE_VLLM_SKIP=1 skips the vLLM part. VPY: the vLLM venv's python.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
VPY=${VPY:-/var/tmp/fp4forge-vllm-venv/bin/python}
D=$WORK/mixed; rm -rf "$D"; mkdir -p "$D"
[ -x "$FF" ] || { echo "FAIL mixed_ff_binary (no $FF; run make)"; exit 1; }
FP8_RE='self_attn'

# mixed NAME SRC FP8_RE IGNORE_RE KL_MAX [causal_lm.py]: fp4forge, threads, llm-compressor, HF load
# (KL_MAX "-": no HF load, for a crafted source that has no reference logits)
mixed() {
    local name=$1 src=$2 fp8=$3 ign=$4 kl=$5; shift 5
    local out="$D/$name/ff" args=(--fp8 "$fp8" --ignore "$ign" --allow-partial --no-doctor)
    if ! "$FF" quantize "$src" "$out" --threads 2 "${args[@]}" > "$out.log" 2>&1; then
        echo "FAIL ${name}_ff_quantize ($(tail -1 "$out.log"))"; rc=1; return
    fi
    echo "PASS ${name}_ff_quantize ($(grep -m1 quantized "$out.log" | sed 's/^ *//'); $(grep -m1 "^  fp8 " "$out.log" | sed "s/^ *//"))"
    judge "$name" "$src" "$fp8" "$ign" "$kl" "${args[@]}" -- "$@"
}

# judge NAME SRC FP8_RE IGNORE_RE KL_MAX FF_ARGS... -- [causal_lm.py]: the output $D/NAME/ff
# against --threads 1, llm-compressor, the checking commands and the HF load
judge() {
    local name=$1 src=$2 fp8=$3 ign=$4 kl=$5 out="$D/$1/ff" args=(); shift 5
    while [ "$1" != -- ]; do args+=("$1"); shift; done; shift
    "$FF" quantize "$src" "$out.t1" --threads 1 "${args[@]}" > "$out.t1.log" 2>&1
    local bad; bad=$(bash tests/same_output.sh "$out" "$out.t1")
    if [ -z "$bad" ]; then echo "PASS ${name}_threads_1_vs_2_identical ($(ls "$out" | wc -l) files)"
    else echo "FAIL ${name}_threads_1_vs_2_identical (differ:$bad)"; rc=1; fi
    pyrun ${name}_llmc_quantize "$D/$name" "$@" $CONF/t_mixed.py llmc $name "$src" "$D/$name/llmc" "$fp8" "$ign" "$out"
    if [ -f "$D/$name/llmc/model.safetensors" ]; then
        pyrun ${name}_compare "$D/$name" $CONF/t_mixed.py compare $name "$out" "$D/$name/llmc"
    else echo "FAIL ${name}_llmc_quantize ($(tail -1 "$D/$name/${name}_llmc_quantize.err" | cut -c1-200))"; rc=1; fi
    checks "$name" "$src" "$out"
    [ "$kl" = - ] && return
    pyrun ${name}_hf "$D/$name" "$@" $CONF/hf_load_kl.py ${name}_hf "$out" "$src/ref_logits.pt" $kl --bf16 "$src" \
        --peer "$D/$name/llmc"
}

# checks NAME SRC OUT: the checking commands on the mixed output. verify and verify --against
# SRC pass (FP8 figures apart); fp4forge dequantize == compressed-tensors 0.19's own
# decompression of the whole model (t_mixed.py dequant: NaiveQuantizationCompressor for the
# FP8 group, NVFP4PackedCompressor for the NVFP4 one), every tensor's name, dtype, shape and
# bytes (t_mixed.py same_dequant).
checks() {
    local name=$1 src=$2 out=$3
    if "$FF" verify "$out" > "$out.verify" 2>&1 && "$FF" verify "$out" --against "$src" > "$out.verify_against" 2>&1; then
        echo "PASS ${name}_verify_against ($(grep ' error ' "$out.verify_against" | sed 's/^ *ok *//' | tr -s ' ' | cut -c1-230))"
    else
        echo "FAIL ${name}_verify_against ($(grep -h -m3 -E 'FAIL|^ {9}' "$out.verify" "$out.verify_against" 2>/dev/null | tr -s ' ' | paste -sd' ' | cut -c1-300))"; rc=1
    fi
    if ! "$FF" dequantize "$out" "$out.ffdq" > "$out.ffdq.log" 2>&1; then
        echo "FAIL ${name}_dequantize ($(tail -1 "$out.ffdq.log"))"; rc=1; return
    fi
    pyrun ${name}_ct_dequant "$D/$name" $CONF/t_mixed.py dequant "$out" "$src" "$out.ctdq"
    pyrun ${name}_dequantize_equals_ct "$D/$name" $CONF/t_mixed.py same_dequant ${name}_dequantize_equals_ct "$out.ffdq" "$out.ctdq"
}

# nvfp4_bytes SRC: the all-NVFP4A16 output's tensor bytes, the floor a budget adds to
nvfp4_bytes() { "$FF" plan "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_out"])'; }

# budgeted NAME SRC PERCENT: quantize --budget (all-NVFP4A16 + PERCENT% bytes) chooses the
# schemes; llm-compressor gets the same recipe as exact names: its FP8 targets and kept modules
# read back from fp4forge's quantization_config (t_mixed.py llmc checks the targets resolve to
# exactly those Linears)
budgeted() {
    local name=$1 src=$2 pct=$3 out="$D/$1/ff"
    mkdir -p "$D/$name"
    local floor; floor=$(nvfp4_bytes "$src")
    local args=(--budget $((floor * (100 + pct) / 100)) --no-doctor)
    if ! "$FF" quantize "$src" "$out" --threads 2 "${args[@]}" > "$out.log" 2>&1; then
        echo "FAIL ${name}_ff_quantize ($(tail -1 "$out.log"))"; rc=1; return
    fi
    local res; res=$(python3 - "$out/config.json" <<'EOF'
import json, re, sys
qc = json.load(open(sys.argv[1]))["quantization_config"]
fp8 = [t for g in qc["config_groups"].values() if g["weights"]["num_bits"] == 8 for t in g["targets"]]
kept = [n for n in qc["ignore"] if n != "lm_head"]
alt = lambda names: "^(" + "|".join(re.escape(n) for n in names) + ")$" if names else "(?!x)x"
print(alt(fp8)); print(alt(kept).lstrip("^")); print(f"{len(fp8)} FP8 Linears, {len(kept)} kept")
EOF
)
    local fp8 ign what; { read -r fp8; read -r ign; read -r what; } <<< "$res"
    echo "PASS ${name}_ff_quantize (--budget +$pct%: $what)"
    judge "$name" "$src" "$fp8" "$ign" 0.002 "${args[@]}" -- $CONF/causal_lm.py
}

mkdir -p "$D/llama"
pyrun llama_make "$D/llama" $CONF/make_tiny_llama.py llama "$D/llama/src" > /dev/null
# KL thresholds as t_llama.sh / t_core.sh set them for all-NVFP4A16
if [ -f "$D/llama/src/model.safetensors" ]; then
    mixed llama "$D/llama/src" "$FP8_RE" 'layers\.1\.mlp\.down_proj' 0.002 $CONF/causal_lm.py
    # the budget's own choice (issue 40, item 3): FP8 and kept units by sensitivity
    budgeted llama_budget "$D/llama/src" 30
    # every quantized Linear FP8: one group, global format naive-quantized
    mkdir -p "$D/llama_fp8_only"
    mixed llama_fp8_only "$D/llama/src" 'self_attn|mlp' 'layers\.1\.mlp\.down_proj' 0.002 $CONF/causal_lm.py
    # the edge rows (all-zero row: eps scale; -0.0 and tiny values; rows x 1e-6, x 1e4) in each
    # dtype the scale is written in
    for dt in bfloat16 float16 float32; do
        mkdir -p "$D/llama_edge_$dt"
        pyrun llama_edge_${dt}_craft "$D/llama_edge_$dt" $CONF/t_mixed.py craft "$D/llama/src" "$D/llama_edge_$dt/src" $dt
        mixed llama_edge_$dt "$D/llama_edge_$dt/src" "$FP8_RE" 'layers\.1\.mlp\.down_proj' - $CONF/causal_lm.py
    done
fi
if [ -f "$FIX/gemma4-tiny-dense.tar.gz" ]; then
    mkdir -p "$D/gemma4_dense" && unpack gemma4-tiny-dense "$D/gemma4_dense/src" \
        && mixed gemma4_dense "$D/gemma4_dense/src" "$FP8_RE" 'layers\.3\.mlp\.down_proj' 0.01
else echo "SKIP gemma4_dense (no fixture $FIX/gemma4-tiny-dense.tar.gz)"; fi

if [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ] || [ ! -x "$VPY" ]; then
    echo "SKIP mixed_vllm (FP4FORGE_VLLM_SKIP or no vLLM venv at $VPY)"; exit $rc
fi
V=$D/vllm; mkdir -p "$V"
if ! bash tests/vllm/install_plugin.sh "$(dirname "$(dirname "$VPY")")" > "$V/plugin.log" 2>&1; then
    echo "FAIL mixed_vllm_plugin_install ($(tail -2 "$V/plugin.log" | tr '\n' ' '))"; exit 1
fi
pyrun vmake "$V" $CONF/t_mixed.py vmake "$FIX" "$V"
for m in llama gemma4_dense; do
    if ! "$FF" quantize "$V/$m/bf16" "$V/$m/q" --fp8 "$FP8_RE" --ignore 'layers\.1\.mlp\.down_proj' --allow-partial \
        --no-doctor --quiet > "$V/$m.log" 2>&1; then
        echo "FAIL vllm_${m}_ff_quantize ($(tail -1 "$V/$m.log"))"; rc=1; continue
    fi
    pyrun vllm_${m}_dequant "$V" $CONF/t_mixed.py dequant "$V/$m/q" "$V/$m/bf16" "$V/$m/dq"
done
# a --budget output of the same Llama (+30% bytes: FP8, NVFP4A16 and kept units in one model)
# (an absolute link: WORK may be relative, as make test gives it)
mkdir -p "$V/llama_budget" && ln -sfn "$(realpath "$V/llama/bf16")" "$V/llama_budget/bf16"
floor=$(nvfp4_bytes "$V/llama/bf16")
if "$FF" quantize "$V/llama/bf16" "$V/llama_budget/q" --budget $((floor * 130 / 100)) --no-doctor --quiet \
    > "$V/llama_budget.log" 2>&1; then
    pyrun vllm_llama_budget_dequant "$V" $CONF/t_mixed.py dequant "$V/llama_budget/q" "$V/llama/bf16" "$V/llama_budget/dq"
else echo "FAIL vllm_llama_budget_ff_quantize ($(tail -1 "$V/llama_budget.log"))"; rc=1; fi
out=$(timeout 900 "$VPY" $CONF/vllm_mixed.py "$V" llama gemma4_dense llama_budget 2> "$V/vllm_mixed.err"); st=$?
[ -n "$out" ] && echo "$out"
if [ $st -ne 0 ]; then
    rc=1; grep -q '^FAIL ' <<< "$out" || echo "FAIL vllm_mixed_crashed (exit $st; $(tail -1 "$V/vllm_mixed.err" | cut -c1-200))"
fi
exit $rc

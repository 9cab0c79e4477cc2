#!/usr/bin/env bash
# vLLM itself as the oracle (issue 13). Tiny Gemma-4 dense (k_eq_v), Gemma-4 MoE, Llama and
# Qwen3 saved by transformers (vllm_make_models.py), quantized by fp4forge, then read by
# vllm.LLM on CPU (vLLM's CPU build, venv of tests/probe/setup_vllm.sh) through fp4forge's
# TEST plugin (tests/vllm: vLLM's own loading path, only the final matmul replaced by
# dequantize_to_dtype + vLLM's bf16 linear / unquantized fused MoE). vllm_oracle.py checks,
# in one process: q == `fp4forge dequantize` of q exactly, the distance to bf16 (reported),
# the tampered copy (negative control), and that unpatched vLLM still refuses.
# FP4FORGE_VLLM_SKIP=1 skips it (SKIP line).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-/var/tmp/fp4forge-venv/bin/python}
. tests/conformance/conf_lib.sh
T0=$(date +%s)
D="$WORK/vllm"
# the MoE families (issue 14) from the conformance tier's tiny transformers-saved models
MOE_FAMILIES=${FP4FORGE_VLLM_MOE_FAMILIES-qwen3_moe qwen2_moe mixtral glm4_moe llama4 qwen3_5_moe qwen3_5 qwen3_next
    glm4_moe_lite llama4_text}
# (minimax_m2, deepseek_v32 and glm_moe_dsa: vLLM's CPU build loads them but cannot run them;
# FP4FORGE_VLLM_LOAD_ONLY below)
MODELS="gemma4_dense gemma4_moe llama qwen3 $MOE_FAMILIES"
NEG=gemma4_dense
# one q/k/v piece: k_proj of layer 0 (a sliding layer: q, k and v all present)
NEG_KEY=model.language_model.layers.0.self_attn.k_proj.weight_global_scale

if [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ] || [ ! -f "$FIX/gemma4-tiny-dense.tar.gz" ] \
    || [ ! -f "$FIX/gemma4-tiny-moe.tar.gz" ]; then
    echo "SKIP vllm_oracle (FP4FORGE_VLLM_SKIP or no Gemma-4 fixtures in $FIX)"
    exit 0
fi
rm -rf "$D"; mkdir -p "$D"

VENV=$(timeout 1200 bash tests/probe/setup_vllm.sh 2> "$D/setup.log" | tail -1)
if [ ! -x "$VENV/bin/python" ]; then
    echo "FAIL vllm_venv_setup (see $D/setup.log: $(tail -2 "$D/setup.log" | tr '\n' ' '))"
    exit 1
fi
if ! bash tests/vllm/install_plugin.sh "$VENV" > "$D/plugin.log" 2>&1; then
    echo "FAIL vllm_plugin_install ($(tail -2 "$D/plugin.log" | tr '\n' ' '))"
    exit 1
fi
echo "PASS vllm_venv_and_plugin ($VENV; plugin tests/vllm/fp4forge_vllm_cpu_nvfp4; $(( $(date +%s) - T0 ))s)"
VPY="$VENV/bin/python"

# vpyrun LABEL SCRIPT ARGS...: like conf_lib's pyrun, with the vLLM venv's python and a time
# limit: stdout (PASS/FAIL lines) shown, stderr in $D/LABEL.err, a death without a FAIL line
# (crash, kill, timeout) gets one.
vpyrun() {
    local label=$1; shift
    local out; out=$(timeout 900 "$VPY" "$@" 2> "$D/$label.err"); local st=$?
    [ -n "$out" ] && echo "$out"
    if [ $st -ne 0 ]; then
        rc=1
        grep -q '^FAIL ' <<< "$out" || echo "FAIL ${label}_crashed (exit $st$([ $st -eq 124 ] && echo ', timed out after 900s'); $(tail -1 "$D/$label.err" | cut -c1-200); see $D/$label.err)"
    fi
    return 0
}

vpyrun vllm_make_models "$CONF/vllm_make_models.py" "$FIX" "$D"
[ -d "$D/qwen3/bf16" ] || { echo "FAIL vllm_make_models (see $D/vllm_make_models.err)"; exit 1; }
for fam in $MOE_FAMILIES; do
    pyrun vllm_${fam}_make "$D" $CONF/make_tiny_moe_families.py $fam "$D/$fam/bf16" > /dev/null
done
# the real trained model (SmolLM2-135M-Instruct, real_model.sh: made once, reused)
if [ "${FP4FORGE_VLLM_REAL:-1}" = 1 ]; then
    if REAL=$(timeout 900 bash $CONF/real_model.sh "$PY" 2> "$D/real_model.err" | tail -1) && [ -f "$REAL/model.safetensors" ]; then
        mkdir -p "$D/smollm2" && ln -sfn "$REAL" "$D/smollm2/bf16" && MODELS="$MODELS smollm2"
    else echo "FAIL vllm_real_model_make ($(tail -1 "$D/real_model.err" | cut -c1-200))"; rc=1; fi
fi
# llm-compressor's model_free_ptq on Qwen3-MoE: its experts' gate/up are not paired
UNPAIRED=()
case " $MOE_FAMILIES " in *" qwen3_moe "*)
    pyrun vllm_qwen3_moe_model_free_ptq "$D" $CONF/llmc_model_free.py "$D/qwen3_moe/bf16" "$D/qwen3_moe/mfp" > /dev/null
    [ -f "$D/qwen3_moe/mfp/config.json" ] && UNPAIRED=(--unpaired qwen3_moe) ;;
esac

for m in $MODELS; do
    if ! "$FF" quantize "$D/$m/bf16" "$D/$m/q" --no-doctor --quiet > "$D/$m/q.log" 2>&1; then
        echo "FAIL vllm_${m}_ff_quantize ($(tail -1 "$D/$m/q.log"))"; rc=1; continue
    fi
    "$FF" verify "$D/$m/q" --against "$D/$m/bf16" > "$D/$m/verify.log" 2>&1; st=$?
    if ! "$FF" dequantize "$D/$m/q" "$D/$m/dq" > "$D/$m/dq.log" 2>&1; then
        echo "FAIL vllm_${m}_ff_dequantize ($(tail -1 "$D/$m/dq.log"))"; rc=1; continue
    fi
    if [ $st -eq 0 ]; then
        echo "PASS vllm_${m}_ff_quantize_verify ($(grep -m1 quantized "$D/$m/q.log" | sed 's/^ *//'); verify --against exit 0)"
    else
        echo "FAIL vllm_${m}_ff_quantize_verify (verify exit $st: $(grep -m1 -i fail "$D/$m/verify.log"))"; rc=1
    fi
done

# Negative control: the same output with k_proj's global scale of one layer doubled (a
# safetensors header edit, no torch): q/k/v no longer share it.
mkdir -p "$D/neg"; cp -r "$D/$NEG/q" "$D/neg/q"
if python3 - "$D/neg/q/model.safetensors" "$NEG_KEY" > "$D/neg/tamper.log" 2>&1 <<'PYEOF'
import json, struct, sys
path, key = sys.argv[1], sys.argv[2]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))[key]
    assert meta["dtype"] == "F32", meta
    lo, hi = meta["data_offsets"]
    f.seek(8 + n + lo); old = struct.unpack(f"<{(hi - lo) // 4}f", f.read(hi - lo))
    f.seek(8 + n + lo); f.write(struct.pack(f"<{len(old)}f", *[2 * v for v in old]))
print(f"{key}: {old[0]!r} -> {2 * old[0]!r}")
PYEOF
then
    "$FF" verify "$D/neg/q" --against "$D/$NEG/bf16" > "$D/neg/verify.log" 2>&1; st=$?
    if [ $st -eq 6 ]; then
        failed=$(awk '$1 == "FAIL" { printf "%s%s", sep, $2; sep = ", " }' "$D/neg/verify.log")
        echo "PASS vllm_neg_verify_fails_exit_6 ($(cat "$D/neg/tamper.log"); verify failed: $failed; $(grep -m1 'relative error' "$D/neg/verify.log" | sed 's/^ *//'))"
    else
        echo "FAIL vllm_neg_verify_fails_exit_6 (exit $st; $(tail -1 "$D/neg/verify.log"))"; rc=1
    fi
    "$FF" dequantize "$D/neg/q" "$D/neg/dq" > "$D/neg/dq.log" 2>&1 \
        || { echo "FAIL vllm_neg_ff_dequantize ($(tail -1 "$D/neg/dq.log"))"; rc=1; }
else
    echo "FAIL vllm_neg_tamper ($(tail -1 "$D/neg/tamper.log"))"; rc=1
fi

# repair-scales on the tampered copy: one global scale per group again, so vLLM
# reads it without the parallel-layer warning and equals its dequantized copy
REPAIRED=()
if [ -d "$D/neg/q" ] && "$FF" repair-scales "$D/neg/q" "$D/repaired/q" > "$D/repaired.log" 2>&1 \
    && "$FF" dequantize "$D/repaired/q" "$D/repaired/dq" > "$D/repaired-dq.log" 2>&1; then
    ln -sfn "../$NEG/bf16" "$D/repaired/bf16"
    REPAIRED=(repaired)
    echo "PASS vllm_repair_scales_of_neg ($(grep -m1 'worst relative error introduced' "$D/repaired.log" | sed 's/^ *//'))"
else
    echo "FAIL vllm_repair_scales_of_neg ($(tail -1 "$D/repaired.log" "$D/repaired-dq.log" 2>/dev/null | tr '\n' ' '))"; rc=1
fi

# Qwen3.5 with its Gated-DeltaNet projections quantized as well (not llm-compressor's default,
# which ignores linear_attn): --only reaches the kept Linears, and the pairs vLLM fuses
# (in_proj_qkv + in_proj_z, in_proj_b + in_proj_a) share one global scale each
LINEAR_ATTN=()
if [ -d "$D/qwen3_5/bf16" ]; then
    mkdir -p "$D/qwen3_5_linear_attn"; ln -sfn ../qwen3_5/bf16 "$D/qwen3_5_linear_attn/bf16"
    if "$FF" quantize "$D/qwen3_5/bf16" "$D/qwen3_5_linear_attn/q" --no-doctor --quiet \
            --only 'self_attn\.|mlp\.|linear_attn\.(in_proj_(qkv|z|b|a)|out_proj)$' > "$D/qwen3_5_linear_attn/q.log" 2>&1 \
        && "$FF" dequantize "$D/qwen3_5_linear_attn/q" "$D/qwen3_5_linear_attn/dq" > "$D/qwen3_5_linear_attn/dq.log" 2>&1; then
        LINEAR_ATTN=(qwen3_5_linear_attn)
        echo "PASS vllm_qwen3_5_linear_attn_ff_quantize ($(grep -m1 quantized "$D/qwen3_5_linear_attn/q.log" | sed 's/^ *//'), linear_attn projections among them)"
    else
        echo "FAIL vllm_qwen3_5_linear_attn_ff_quantize ($(tail -1 "$D/qwen3_5_linear_attn/q.log"))"; rc=1
    fi
fi

vpyrun vllm_oracle "$CONF/vllm_oracle.py" "$D" --models $MODELS "${LINEAR_ATTN[@]}" "${REPAIRED[@]}" --neg "$NEG" \
    --refuse-dense gemma4_dense --refuse-moe gemma4_moe "${UNPAIRED[@]}"

# Families vLLM's CPU build loads but cannot run: its loader is the oracle for the names and
# shapes (every parameter set), the refusal is named; numerics are proven through transformers
# (t_moe_families.sh: logits equal to llm-compressor's output's)
declare -A REFUSAL=([minimax_m2]="AssertionError:  (cpu_router.py" [deepseek_v32]="Sparse Attention is not supported on CPU."
                    [glm_moe_dsa]="Sparse Attention is not supported on CPU.")
for fam in ${FP4FORGE_VLLM_LOAD_ONLY-minimax_m2 deepseek_v32 glm_moe_dsa}; do
    pyrun vllm_${fam}_make "$D" $CONF/make_tiny_moe_families.py $fam "$D/$fam/bf16" > /dev/null
    if ! "$FF" quantize "$D/$fam/bf16" "$D/$fam/q" --no-doctor --quiet > "$D/$fam/q.log" 2>&1; then
        echo "FAIL vllm_${fam}_ff_quantize ($(tail -1 "$D/$fam/q.log"))"; rc=1; continue
    fi
    vpyrun vllm_${fam}_load_only "$CONF/vllm_load_only.py" vllm_$fam "$D/$fam/q" "${REFUSAL[$fam]}"
done
echo "# t_vllm.sh took $(( $(date +%s) - T0 ))s (vLLM log: $D/vllm_oracle.err)"
exit $rc

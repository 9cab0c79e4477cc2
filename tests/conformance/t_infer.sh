#!/usr/bin/env bash
# Conformance: a family as data, on two MoE architectures fp4forge has no built-in family
# for, both served by vLLM 0.32 and saved by transformers 5.17 (make_tiny_moe_families.py):
#   ernie4_5_moe    Ernie4_5_MoeForCausalLM (ERNIE-4.5-21B-A3B's layout): layer 0 dense
#                   (moe_layer_start_index), shared_experts, router mlp.gate.weight a bare
#                   fp32 parameter plus mlp.moe_statics.e_score_correction_bias; vLLM's
#                   native ernie45_moe.py
#   hunyuan_v1_moe  HunYuanMoEV1ForCausalLM (Hunyuan-A13B's layout): every layer MoE,
#                   shared_mlp, router mlp.gate.wg an fp32 Linear, q/k RMSNorm; vLLM's
#                   Transformers modeling backend (TransformersMoEForCausalLM)
# Per model:
#   infer_F_builtin_refuses      quantize with no family flag exits non-zero and writes no
#                                model (no built-in family claims it, so the rest really
#                                runs on the inferred description)
#   infer_F_plan_infer           plan SRC --infer exits 0 with a description on stdout, the
#                                same text twice (family.fam)
#   infer_F_ff_quantize, infer_F_threads_1_vs_2_identical
#                                quantize SRC OUT --family-file family.fam --no-doctor --quiet
#                                at --threads 2 and 1, every file cmp-identical
#   infer_F_infer_family_identical
#                                quantize --infer-family: the same files, byte for byte (the
#                                card compared as tests/same_output.sh does: its title and
#                                serve line name OUT)
#   then t_moe_families.sh's checks on the --family-file output: ct_match.py (compressed-
#   tensors' compressor, fused observer groups; its decompressor vs fp4forge dequantize),
#   llmc_compare.py against llmc_quantize_moe.py (llm-compressor 0.14 NVFP4A16 oneshot; no
#   example of its own for either family: lm_head + routers), hf_load_kl.py through
#   causal_lm.py with --linearized (transformers builds both families' experts fused 3-D)
#   and --peer (logits equal to llm-compressor's output's), and vLLM 0.32's CPU loader with
#   the TEST plugin (vllm_oracle.py's check_model: q == fp4forge's dequantized copy exactly,
#   distance to bf16 reported). FP4FORGE_VLLM_SKIP=1 skips the vLLM part (SKIP line);
#   FP4FORGE_INFER_FAMILIES narrows the families.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
[ -x "$FF" ] || { echo "FAIL infer_ff_binary (no $FF; run make)"; exit 1; }
T0=$(date +%s)
ALL="ernie4_5_moe hunyuan_v1_moe"
DW=$WORK/infer; rm -rf "$DW"; mkdir -p "$DW"
DW=$(cd "$DW" && pwd)   # absolute: the vLLM layout below links into it
SAME=tests/same_output.sh

# quantize_threads_args NAME SRC OUT ARGS...: conf_lib.sh's quantize_and_threads with ARGS
# (the family flags, --quiet) given to both runs: --threads 2 (OUT) and 1 (OUT.t1), every
# output file byte-identical
quantize_threads_args() {
    local name=$1 src=$2 out=$3; shift 3
    "$FF" quantize "$src" "$out" --threads 2 --no-doctor "$@" > "$out.log" 2>&1; local st=$?
    if [ $st -ne 0 ]; then
        echo "FAIL ${name}_ff_quantize (exit $st: $(tail -1 "$out.log" | cut -c1-200))"; rc=1; return 1
    fi
    local packed
    packed=$(python3 - "$out" <<'PYEOF'
import glob, json, struct, sys
n = 0
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(f, "rb") as fh:
        h = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
    n += sum(k.endswith(".weight_packed") for k in h)
print(n)
PYEOF
)
    echo "PASS ${name}_ff_quantize ($* at --threads 2: exit 0, $packed modules packed, $(ls "$out" | wc -l) files)"
    if ! "$FF" quantize "$src" "$out.t1" --threads 1 --no-doctor "$@" > "$out.t1.log" 2>&1; then
        echo "FAIL ${name}_threads_1_vs_2_identical (--threads 1 failed: $(tail -1 "$out.t1.log" | cut -c1-200))"; rc=1; return 0
    fi
    local bad
    bad=$(bash "$SAME" "$out" "$out.t1")
    if [ -z "$bad" ]; then echo "PASS ${name}_threads_1_vs_2_identical ($(ls "$out" | wc -l) files cmp-identical)"
    else echo "FAIL ${name}_threads_1_vs_2_identical (differ:$bad)"; rc=1; fi
}

VLLM_MODELS=()
for fam in ${FP4FORGE_INFER_FAMILIES:-$ALL}; do
    N=infer_$fam
    D=$DW/$fam; mkdir -p "$D"
    pyrun ${N}_make "$D" $CONF/make_tiny_moe_families.py $fam "$D/src" > /dev/null
    [ -f "$D/src/model.safetensors" ] || { echo "FAIL ${N}_make ($(tail -1 "$D/${N}_make.err" | cut -c1-200))"; rc=1; continue; }

    # no built-in family: a plain quantize must refuse (and leave no model behind)
    "$FF" quantize "$D/src" "$D/ff-builtin" --no-doctor --quiet > "$D/ff-builtin.log" 2>&1; st=$?
    if [ $st -ne 0 ] && [ ! -f "$D/ff-builtin/model.safetensors" ]; then
        echo "PASS ${N}_builtin_refuses (quantize with no family flag: exit $st, no model written; $(tail -1 "$D/ff-builtin.log" | cut -c1-160))"
    else
        echo "FAIL ${N}_builtin_refuses (quantize with no family flag: exit $st$([ -f "$D/ff-builtin/model.safetensors" ] && echo ', a model written'): a built-in family claims $fam, so this test does not exercise --infer)"; rc=1
    fi

    # the proposed description: exit 0, non-empty, deterministic
    "$FF" plan "$D/src" --infer > "$D/family.fam" 2> "$D/plan-infer.err"; st=$?
    "$FF" plan "$D/src" --infer > "$D/family2.fam" 2>> "$D/plan-infer.err"; st2=$?
    if [ $st -eq 0 ] && [ $st2 -eq 0 ] && [ -s "$D/family.fam" ] && cmp -s "$D/family.fam" "$D/family2.fam"; then
        echo "PASS ${N}_plan_infer (plan --infer: exit 0, $(wc -l < "$D/family.fam") lines, the same text twice; $D/family.fam)"
    else
        echo "FAIL ${N}_plan_infer (exit $st/$st2, $(wc -c < "$D/family.fam") bytes, twice equal: $(cmp -s "$D/family.fam" "$D/family2.fam" && echo yes || echo no); $(tail -1 "$D/plan-infer.err" | cut -c1-200))"; rc=1
        continue
    fi

    quantize_threads_args $N "$D/src" "$D/ff" --family-file "$D/family.fam" --quiet || continue

    # --infer-family: the same description inferred in-process, so the same output
    if "$FF" quantize "$D/src" "$D/ff-inferred" --infer-family --no-doctor --quiet > "$D/ff-inferred.log" 2>&1; then
        bad=$(bash "$SAME" "$D/ff" "$D/ff-inferred")
        if [ -z "$bad" ]; then echo "PASS ${N}_infer_family_identical (--infer-family == --family-file plan --infer's text: $(ls "$D/ff" | wc -l) files cmp-identical)"
        else echo "FAIL ${N}_infer_family_identical (differ:$bad)"; rc=1; fi
    else
        echo "FAIL ${N}_infer_family_identical (quantize --infer-family failed: $(tail -1 "$D/ff-inferred.log" | cut -c1-200))"; rc=1
    fi

    DEQ=$(dequantize "$D/ff" "$D/ff-deq" $N) || DEQ=
    # experts are per expert [I,H] / [H,I] in both sources (transformers saves its fused
    # 3-D experts back under the checkpoint names, qwen2_moe's conversion mapping)
    export CT_TRANSPOSED_EXPERTS=0
    pyrun ${N}_ct "$D" $CONF/ct_match.py $N "$D/src" "$D/ff" $DEQ
    pyrun ${N}_llmc_quantize "$D" $CONF/llmc_quantize_moe.py $fam "$D/src" "$D/llmc" > /dev/null
    if [ -f "$D/llmc/model.safetensors" ]; then
        # the routers: llm-compressor writes what transformers loaded them as (fp32:
        # ERNIE's _keep_in_fp32_modules_strict, Hunyuan's Linear(dtype=float32)), fp4forge the
        # source's bf16; llmc_compare.py explains equal values after widening
        pyrun ${N}_llmc "$D" $CONF/llmc_compare.py ${N}_llmc "$D/ff" "$D/llmc"
        PEER=(--peer "$D/llmc")
    else
        echo "FAIL ${N}_llmc_quantize ($(tail -1 "$D/${N}_llmc_quantize.err" | cut -c1-200))"; rc=1; PEER=()
    fi
    pyrun ${N}_hf "$D" $CONF/causal_lm.py $CONF/hf_load_kl.py ${N}_hf "$D/ff" "$D/src/ref_logits.pt" 0.01 \
        --bf16 "$D/src" --linearized "${PEER[@]}"

    # vllm_oracle.py's layout: WORK/NAME/{bf16,q,dq}
    if [ -n "$DEQ" ]; then
        mkdir -p "$DW/vllm/$N"
        ln -sfn "$D/src" "$DW/vllm/$N/bf16"; ln -sfn "$D/ff" "$DW/vllm/$N/q"; ln -sfn "$D/ff-deq" "$DW/vllm/$N/dq"
        VLLM_MODELS+=("$N")
    fi
done

# vLLM 0.32's CPU build: its own loader, name mapping and expert mapping on the output
# (ernie45_moe.py: per-expert experts.E.{gate,up,down}_proj into w13/w2, moe_statics ->
# gate.e_score_correction_bias; Hunyuan: the Transformers backend's fused q/k/v and
# shared gate/up, FusedMoE with external routing), the TEST plugin's dequantize only
if [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ]; then
    echo "SKIP infer_vllm (FP4FORGE_VLLM_SKIP=1)"
elif [ ${#VLLM_MODELS[@]} -eq 0 ]; then
    echo "SKIP infer_vllm (no model quantized and dequantized above)"
else
    VENV=$(timeout 1200 bash tests/probe/setup_vllm.sh 2> "$DW/vllm-setup.log" | tail -1)
    if [ ! -x "$VENV/bin/python" ]; then
        echo "FAIL infer_vllm_venv_setup (see $DW/vllm-setup.log: $(tail -2 "$DW/vllm-setup.log" | tr '\n' ' '))"; rc=1
    elif ! bash tests/vllm/install_plugin.sh "$VENV" > "$DW/vllm-plugin.log" 2>&1; then
        echo "FAIL infer_vllm_plugin_install ($(tail -2 "$DW/vllm-plugin.log" | tr '\n' ' '))"; rc=1
    else
        out=$(timeout 900 "$VENV/bin/python" - "$DW/vllm" "$CONF" "${VLLM_MODELS[@]}" 2> "$DW/vllm.err" <<'PYEOF'
import os, sys, time
work, conf, names = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, conf)
import vllm_oracle as O   # sets vLLM's environment (in-process engine, CPU) on import
t0 = time.time()
import vllm
from vllm.plugins import load_general_plugins
load_general_plugins()
import fp4forge_vllm_cpu_nvfp4  # noqa: F401  (tests/vllm/install_plugin.sh)
print(f"# vllm {vllm.__version__} imported in {time.time() - t0:.1f}s", file=sys.stderr)
results = {}
for name in names:
    O.guarded(f"vllm_{name}", lambda: O.check_model(work, name, results))
sys.exit(O.rc)
PYEOF
); st=$?
        [ -n "$out" ] && echo "$out"
        if [ $st -ne 0 ]; then
            rc=1
            grep -q '^FAIL ' <<< "$out" || echo "FAIL infer_vllm_crashed (exit $st$([ $st -eq 124 ] && echo ', timed out after 900s'); $(tail -1 "$DW/vllm.err" | cut -c1-200); see $DW/vllm.err)"
        fi
    fi
fi
echo "# t_infer.sh took $(( $(date +%s) - T0 ))s"
exit $rc

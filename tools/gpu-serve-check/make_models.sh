#!/usr/bin/env bash
# Makes every checkpoint the H200 vLLM check serves, with fp4forge itself (and transformers
# for the Llama). Runs on the H200 host in call 1 (device_prepare.sh), or here for a dry run.
# usage: make_models.sh FP4FORGE OUT [PYTHON]
# OUT/<family>/ for family in gemma4_dense, gemma4_moe, llama, real31b:
#   bf16  the bf16 source (fp4forge synth: transformers 5.17's per_layer_config schema;
#         make_llama.py for the Llama)
#   q     fp4forge quantize bf16           (NVFP4A16, compressed-tensors nvfp4-pack-quantized)
#   dq    fp4forge dequantize q            (the exact weights q stands for, bf16; not real31b)
#   served copies: Gemma-4's bf16/q/dq get `fp4forge doctor --fix --schema legacy` on a copy
#   (bf16L, qL, dqL), since vLLM <= 0.26 reads global_head_dim / num_global_key_value_heads.
# Geometry: gemma4 tiny presets at 6 layers (layer 5 full attention; head_dim 64 sliding,
# 128 full, k_eq_v with 1 KV head there; hidden 256, MLP 512; MoE: 8 experts of 128, top-2;
# vocab 2048). real31b: the 31B dense geometry (hidden 5376, MLP 21504, 32 heads, 16 KV heads
# of 256 on the sliding layer, 4 KV heads of 512 on the full one) at 2 layers, vocab 2048,
# a 1-layer token vision tower (not built: language_model_only).
set -euo pipefail
FF=$1; OUT=$2; PY=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
step() { echo "+ $*" >&2; "$@"; }
legacy() {  # served copy of DIR with the legacy Gemma-4 schema
  rm -rf "$2"; cp -r "$1" "$2"; step "$FF" doctor --fix --schema legacy "$2" > "$2.doctor.log"
}
for fam in gemma4_dense gemma4_moe; do
  d=$OUT/$fam; mkdir -p "$d"
  step "$FF" synth "$d/bf16" --arch "${fam/_/-}" --layers 6 --force
  step "$FF" quantize "$d/bf16" "$d/q" --force --quiet
  legacy "$d/bf16" "$d/bf16L"
  legacy "$d/q" "$d/qL"
  step "$FF" dequantize "$d/qL" "$d/dqL" --force
done
d=$OUT/llama; mkdir -p "$d"; rm -rf "$d/bf16"
step "$PY" "$here/make_llama.py" "$d/bf16"
step "$FF" quantize "$d/bf16" "$d/q" --force --quiet --no-doctor
step "$FF" dequantize "$d/q" "$d/dq" --force
d=$OUT/real31b; mkdir -p "$d"
step "$FF" synth "$d/bf16" --arch gemma4-dense --size real --layers 2 --full-every 2 --vocab 2048 \
  --vision-layers 1 --vision-hidden 64 --vision-intermediate 128 --force
step "$FF" quantize "$d/bf16" "$d/q" --force --quiet
legacy "$d/bf16" "$d/bf16L"
legacy "$d/q" "$d/qL"
rm -rf "$d/bf16"   # 2 GB; bf16L is the same weights
for f in "$OUT"/*/*/model*.safetensors; do echo "$(du -m "$f" | cut -f1) MB $f"; done >&2
echo "make_models: done" >&2

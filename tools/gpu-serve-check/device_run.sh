#!/usr/bin/env bash
# The last call on the H200 host (README.md beside this: the calls). Carries the last part of
# the stream. Checks every part, puts vLLM's CUDA extensions into /tmp/site, checks the
# imports again, then serves the four families in parallel processes (each its own
# run_vllm.py: bf16, NVFP4 (q), dequantized (dq); real31b: q and bf16) and compares them.
# $OUT gets summary.md, summary.json and results.tar.gz (every log and per-family JSON).
set -uo pipefail
here=tools/gpu-serve-check
G=/tmp/gsc; O=${OUT:-$G/out}; R=$G/results
mkdir -p "$R" "$O"
last=$(ls -d .gsc/p* | sort -V | tail -1)
cp "$last"/* "$G/parts/" 2>/dev/null
[ -d "$G/models" ] && [ -d /tmp/site/vllm ] || { echo "FATAL: /tmp/gsc or /tmp/site is gone (the machine was given back between calls): start again at call 1"; ls "$G" /tmp/site 2>&1 | head; exit 3; }
(cd "$G/parts" && sha256sum -c SHA256SUMS) || { echo "FATAL: a part is missing or damaged"; exit 4; }
rm -rf "$G/set/big"
t0=$(date +%s)
cat "$G"/parts/set.tar.* | tar x -C "$G/set" big
for g in "$G"/set/big/*.gz; do
  n=$(basename "$g" .gz); gunzip -c "$g" > "/tmp/site/${n//+//}"
done
ls -la /tmp/site/vllm/*_C*.so /tmp/site/vllm/vllm_flash_attn/*.so
echo "extensions in place: $(( $(date +%s) - t0 )) s"
PYTHONPATH=/tmp/site python3 $here/import_check.py > "$R/import_check2.log" 2>&1
echo "import_check rc=$?"; grep -v "^ok " "$R/import_check2.log" | tail -8
M=$G/models
fam() {  # fam NAME VOCAB ARGS...
  local name=$1; shift
  PYTHONPATH=/tmp/site timeout "${FAM_TIMEOUT:-450}" python3 -u $here/run_vllm.py "$R/$name.json" "$@" \
    > "$R/$name.log" 2>&1
  echo "$name rc=$? ($(( $(date +%s) - t0 )) s)"
}
t0=$(date +%s)
nvidia-smi --query-gpu=memory.used --format=csv,noheader
fam gemma4_dense 2048 --hf "$M/gemma4_dense/bf16" bf16="$M/gemma4_dense/bf16L" q="$M/gemma4_dense/qL" dq="$M/gemma4_dense/dqL" &
sleep 3  # staggered: each picks a free port for its 1-process torch.distributed group
fam gemma4_moe 2048 --hf "$M/gemma4_moe/bf16" bf16="$M/gemma4_moe/bf16L" q="$M/gemma4_moe/qL" dq="$M/gemma4_moe/dqL" &
sleep 3
fam llama 512 --hf "$M/llama/bf16" bf16="$M/llama/bf16" q="$M/llama/q" dq="$M/llama/dq" &
sleep 3
fam real31b 2048 q="$M/real31b/qL" bf16="$M/real31b/bf16L" &
wait
echo "all families: $(( $(date +%s) - t0 )) s"
for f in "$M"/*/*.doctor.log; do cp "$f" "$R/$(basename "$(dirname "$f")")_$(basename "$f")"; done
python3 $here/compare.py "$O/summary.md" "$R"/gemma4_dense.json "$R"/gemma4_moe.json "$R"/llama.json "$R"/real31b.json > /dev/null
tar czf "$O/results.tar.gz" -C "$G" results
for f in "$R"/*.log; do echo "== $(basename "$f"): errors"; grep -n "Error\|error\|Traceback" "$f" | grep -v "kernels_error\|cleanup_error" | head -6; done
cat "$O/summary.md"

#!/usr/bin/env bash
# Starts vLLM's CPU build serving MODEL_DIR on 127.0.0.1:PORT in the
# background and prints its pid; the caller owns it (kill + wait).
# Usage: serve.sh VENV MODEL_DIR PORT NAME LOG [extra vllm args...]
set -euo pipefail
VENV=$1 MODEL=$2 PORT=$3 NAME=$4 LOG=$5
shift 5
# CPU build: small KV cache, no graph capture (compile time dominates on 2
# cores), text only (the tiny checkpoint's image token ids lie outside its
# 512-token vocabulary, so its vision tower cannot be fed).
export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
# One process instead of three (API server, engine core, worker): each would
# import torch and vLLM again, which on 2 busy cores costs about half a minute.
export VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
setsid "$VENV/bin/vllm" serve "$MODEL" --host 127.0.0.1 --port "$PORT" \
    --served-model-name "$NAME" --dtype bfloat16 --max-model-len 512 \
    --max-num-seqs 4 --enforce-eager --language-model-only \
    --distributed-executor-backend uni "$@" \
    > "$LOG" 2>&1 < /dev/null &
echo $!

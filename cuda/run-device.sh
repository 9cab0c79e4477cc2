#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool) with build/devbin carried:
# synthetic 31B-geometry checkpoint -> CPU quantize -> CUDA kernel (bytes
# checked against the CPU kernel) -> torch on the GPU, same tensors.
set -u
B=build/devbin
export LD_LIBRARY_PATH=$PWD/$B/lib
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
$B/fp4forge synth --size real --layers ${LAYERS:-4} --vocab 32768 --vision-layers 0 /tmp/ck
/usr/bin/time -v $B/fp4forge quantize --quiet --no-doctor /tmp/ck /tmp/ckq 2> /tmp/cpu.time | tee $OUT/cpu.txt
grep -E "Maximum resident|Elapsed" /tmp/cpu.time | tee -a $OUT/cpu.txt
$B/fp4forge-cuda-bench /tmp/ck --check | tee $OUT/cuda.json
python3 cuda/torch_gpu_nvfp4.py --in /tmp/ck --ref /tmp/ckq | tee $OUT/torch_gpu.json

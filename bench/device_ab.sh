#!/usr/bin/env bash
# bench/ab.sh on the lent 16-core machine (the tool library's `device`), which has no
# build tools or libraries of ours: build here, then
#   mkdir -p .devbin .devlib; cp OLD .devbin/ff-base; cp build/fp4forge .devbin/ff-new
#   cp -L /lib/x86_64-linux-gnu/{libjansson.so.4,libyaml-0.so.2} .devlib/
#   printf '/.devbin/\n/.devlib/\n' >> .git/info/exclude
# and `run` "bash bench/device_ab.sh" carrying .devbin and .devlib. Makes a 4-layer
# real-geometry Gemma-4 (bf16, 3.9 GB) and a Kimi-K2 FP8-block source (3 layers x 32
# experts, 3.8 GB) in /tmp/m, kept while the machine stays warm, then alternates the two
# binaries with a `cat` each round; the tables land in $OUT.
# `bash bench/device_ab.sh int4` (or mxfp4) does the same for that source format of the
# Kimi-K2 geometry instead (routed experts packed, the rest bf16).
set -u
R=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH=$R/.devlib
B=$R/.devbin
mkdir -p /tmp/m
if [ $# -gt 0 ]; then
    [ -d "/tmp/m/$1" ] || $B/ff-new synth --arch kimi-k2 --size real --layers 3 --experts 32 --vocab 16384 \
        --source "$1" "/tmp/m/$1" > /dev/null
    bash "$R/bench/ab.sh" --rounds 6 --threads "2 16" "/tmp/m/$1" "$B/ff-base" "$B/ff-new" > "$OUT/ab_$1.txt" 2>&1
    echo done
    exit 0
fi
[ -d /tmp/m/g4 ] || $B/ff-new synth --arch gemma4-dense --size real --layers 4 --vision-layers 0 --vocab 16384 /tmp/m/g4 > /dev/null
[ -d /tmp/m/fp8 ] || $B/ff-new synth --arch kimi-k2 --size real --layers 3 --experts 32 --vocab 16384 --source fp8-block /tmp/m/fp8 > /dev/null
bash "$R/bench/ab.sh" --rounds 6 --threads "2 16" /tmp/m/fp8 "$B/ff-base" "$B/ff-new" > "$OUT/ab_fp8.txt" 2>&1
bash "$R/bench/ab.sh" --rounds 6 --threads "16" /tmp/m/g4 "$B/ff-new" > "$OUT/ab_bf16.txt" 2>&1
echo done

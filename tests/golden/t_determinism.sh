#!/usr/bin/env bash
# Output bytes must not depend on the thread count or the kernel: quantizes
# synthetic dense and MoE checkpoints with --threads 1/2/3 and every kernel
# this CPU runs, and compares every output file against the scalar 1-thread
# reference. One PASS/FAIL (or SKIP) line per variant.
set -u
FF=${FF_FAST:-build/fp4forge}
W=${WORK:-build/golden-work}/determinism
rm -rf "$W"; mkdir -p "$W"

same() {   # same DIR_A DIR_B: the same files, byte for byte (the card's serve line aside)
    bash "$(dirname "$0")/../same_output.sh" "$1" "$2" > /dev/null
}

for arch in gemma4-dense gemma4-moe; do
    src="$W/$arch-src"
    if ! "$FF" synth --arch "$arch" --size tiny "$src" >/dev/null 2>"$W/synth.err"; then
        echo "FAIL determinism_${arch}_synth ($(head -1 "$W/synth.err"))"; continue
    fi
    ref="$W/$arch-scalar-t1"
    if ! "$FF" quantize "$src" "$ref" --threads 1 --kernel scalar --shard-size 8MB --quiet >/dev/null 2>"$W/q.err"; then
        echo "FAIL determinism_${arch}_reference ($(head -1 "$W/q.err"))"; continue
    fi
    for kernel in scalar avx2 avx512; do
        for t in 1 2 3; do
            [ "$kernel" = scalar ] && [ "$t" = 1 ] && continue
            name="determinism_${arch}_${kernel}_threads$t"
            out="$W/$arch-$kernel-t$t"
            if ! "$FF" quantize "$src" "$out" --threads "$t" --kernel "$kernel" --shard-size 8MB --quiet >/dev/null 2>"$W/q.err"; then
                if grep -q "cannot run it" "$W/q.err"; then echo "SKIP $name (CPU lacks $kernel)"
                else echo "FAIL $name ($(head -1 "$W/q.err"))"; fi
                continue
            fi
            if same "$ref" "$out"; then echo "PASS $name"; else echo "FAIL $name (bytes differ)"; fi
            rm -rf "$out"
        done
    done
    # default kernel and thread count, as a user runs it
    out="$W/$arch-default"
    "$FF" quantize "$src" "$out" --shard-size 8MB --quiet >/dev/null 2>&1 && same "$ref" "$out" \
        && echo "PASS determinism_${arch}_default" || echo "FAIL determinism_${arch}_default"
    rm -rf "$out" "$src" "$ref"
done

#!/usr/bin/env bash
# Vendor-quantized sources (issue 39, item 4): fp4forge quantizing each source
# format fp4forge decodes -- FP8-block, compressed-tensors INT4
# pack-quantized, compressed-tensors MXFP4 -- at DeepSeek-V3 geometry (synth
# --arch deepseek-v3 --size real, 8 experts, a 16k vocabulary) against a
# page-cached `cat` of the same files, and its peak RSS at two sizes (memory
# must not grow with the model). INT4 and MXFP4 sources pack the routed
# experts only (the rest is bf16, as the published uploads are), so each row
# also says how many of its bytes are packed. Page-cached, best of --runs
# (3); the previous output is removed and flushed outside the timing.
#
# Then the compute bound: the same job on the bf16 synth of the same
# geometry (no decoding at all) in G elements quantized per second on these
# threads. A source with b bytes per element cannot go faster than that
# times b GB/s (FP8: 1 byte; INT4 and MXFP4: about half a byte).
#
# usage: bench/sources.sh [--layers N (>= 5, default 6)] [--dir DIR] [--threads N] [--runs N]
#                         [--formats "fp8-block int4 mxfp4"] [--no-bound] [--keep]
#                         [--arch deepseek-v3|kimi-k2] [--experts E (default 8)]
# The published models hold 95-97% of their weights in routed experts; 8
# experts a layer put most of the elements in the bf16 rest instead, so a
# row then mostly measures quantizing bf16. --arch kimi-k2 --experts 32 (one
# dense layer, 32 experts) puts about four fifths of the elements in experts.
# Disk: each format's two checkpoints are made, measured and removed in turn
# (--keep keeps them; reused when present): at most ~7 GB of source and ~4 GB
# of output at once. FP8-block reuses bench/fp8_source.sh's checkpoints when
# --dir is not given. FP4FORGE_BIN: a prebuilt binary.
set -euo pipefail
cd "$(dirname "$0")/.."
L=6 DIR=/var/tmp/fp4forge-bench-sources FP8DIR=/var/tmp/fp4forge-bench-fp8 THREADS= KEEP=0 BOUND=1 RUNS=3
ARCH=deepseek-v3 EXPERTS=8
FORMATS="fp8-block int4 mxfp4"
while [ $# -gt 0 ]; do
    case "$1" in
    --layers) L=$2; shift ;;
    --dir) DIR=$2; FP8DIR=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --formats) FORMATS=$2; shift ;;
    --arch) ARCH=$2; shift ;;
    --experts) EXPERTS=$2; shift ;;
    --no-bound) BOUND=0 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "bench/sources.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
# DeepSeek-V3's first 3 layers are dense: the small size has 4 (one MoE layer)
[ "$L" -ge 5 ] || { echo "bench/sources.sh: --layers must be >= 5" >&2; exit 2; }
FF=${FP4FORGE_BIN:-$PWD/build/fp4forge}
[ -n "${FP4FORGE_BIN:-}" ] || make -s build/fp4forge > /dev/null
mkdir -p "$DIR" "$FP8DIR"
OUT=$DIR/out
T=(); [ -n "$THREADS" ] && T=(--threads "$THREADS")

dir_of() {   # dir_of FORMAT LAYERS
    if [ "$1" = fp8-block ] && [ "$ARCH" = deepseek-v3 ] && [ "$EXPERTS" = 8 ]; then
        echo "$FP8DIR/ds-L$2"   # bench/fp8_source.sh's
    else
        echo "$DIR/$1-$ARCH-E$EXPERTS-L$2"
    fi
}
synth() {   # synth FORMAT LAYERS -> the checkpoint dir (reused when complete)
    local d; d=$(dir_of "$1" "$2")
    if [ ! -f "$d/.complete" ]; then
        "$FF" synth --arch "$ARCH" --size real --layers "$2" --experts "$EXPERTS" --vocab 16384 \
            --source "$1" "$d" --force > /dev/null
        touch "$d/.complete"
    fi
    echo "$d"
}
drop() {   # drop FORMAT LAYERS: a checkpoint this run may remove
    [ "$KEEP" = 1 ] || [ "$(dir_of "$1" "$2")" = "$FP8DIR/ds-L$2" ] || rm -rf "$(dir_of "$1" "$2")"
}
best() { sort -n | head -1; }
# t_write BYTES: seconds to write that many bytes into a fresh file from memory,
# 1 MB a call as fp4forge writes (bench/run's "output write alone"): a job
# cannot beat writing its output, and on a VM whose dirty limit is below the
# output, that is the disk's speed, not the page cache's
t_write() {
    rm -f "$DIR/write.tmp"; sync
    local t0 t1; t0=$(date +%s.%N)
    dd if=/dev/zero of="$DIR/write.tmp" bs=1M count="$1" iflag=count_bytes status=none
    t1=$(date +%s.%N); rm -f "$DIR/write.tmp"; awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'
}
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'; }
quant() { "$FF" quantize "$1" "$OUT" "${T[@]}" --no-doctor --quiet --force || echo "quantize failed" >&2; }
# timed RUNS times, the last output removed and its dirty pages written first
# (so no run pays for the one before it)
timed() { local i; for i in $(seq "$RUNS"); do rm -rf "$OUT"; sync; secs "$@"; done | best; }
rss() { rm -rf "$OUT"; /usr/bin/time -f %M "$FF" quantize "$1" "$OUT" "${T[@]}" --no-doctor --quiet --force 2>&1 > /dev/null | tail -1; }
bytes() { cat "$1"/*.safetensors | wc -c; }
# Bytes of a checkpoint's tensors that are stored quantized (codes and their
# scales), from the safetensors headers.
packed() {
    python3 - "$1" << 'EOF'
import json, struct, sys, glob
n = 0
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(f, "rb") as fh:
        h = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
    for k, v in h.items():
        if k != "__metadata__" and (v["dtype"] == "F8_E4M3" or k.endswith(("weight_scale_inv", "weight_packed",
                                                                            "weight_scale", "weight_shape"))):
            n += v["data_offsets"][1] - v["data_offsets"][0]
print(n)
EOF
}
# Elements quantized: each output weight_packed holds two per byte.
elements() {
    python3 - "$1" << 'EOF'
import json, struct, sys, glob
n = 0
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(f, "rb") as fh:
        h = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
    n += sum(2 * (v["data_offsets"][1] - v["data_offsets"][0]) for k, v in h.items() if k.endswith("weight_packed"))
print(n)
EOF
}

# measure FORMAT: one row (GB, packed GB, cat, quantize, ratio, G elements/s,
# RSS small and big)
measure() {
    local fmt=$1 small big b p tc tq el rs rb
    small=$(synth "$fmt" 4); rs=$(( $(rss "$small") / 1024 )); local bs; bs=$(bytes "$small"); drop "$fmt" 4
    big=$(synth "$fmt" "$L"); b=$(bytes "$big"); p=$(packed "$big")
    tc=$(timed cat "$big"/*.safetensors)
    tq=$(timed quant "$big")
    el=$(elements "$OUT"); ob=$(bytes "$OUT"); rb=$(( $(rss "$big") / 1024 )); rm -rf "$OUT"; drop "$fmt" "$L"
    tw=$(for i in $(seq "$RUNS"); do t_write "$ob"; done | best)
    awk -v f="$fmt" -v b="$b" -v p="$p" -v c="$tc" -v q="$tq" -v w="$tw" -v e="$el" -v rs="$rs" -v rb="$rb" -v bs="$bs" 'BEGIN{
        printf "%-10s %6.2f %7.2f %7.2f %9.2f %6.3fx %7.3fx %8.2f   %5d MB at %.2f GB, %5d MB at %.2f GB\n",
               f, b / 1e9, p / 1e9, b / 1e9 / c, b / 1e9 / q, c / q, w / q, e / q / 1e9, rs, bs / 1e9, rb, b / 1e9 }'
}

echo "$ARCH geometry, $EXPERTS experts, $L layers (RSS also at 4); page-cached, best of $RUNS; threads: ${THREADS:-all}"
printf "%-10s %6s %7s %7s %9s %7s %8s %8s   %s\n" source GB packed "cat/s" "quant/s" "q/cat" "q/write" "Gelem/s" "peak RSS"
for fmt in $FORMATS; do
    measure "$fmt"
done
echo "q/cat: cat's time over quantize's; q/write: writing quantize's output alone (dd, 1 MB calls) over"
echo "quantize's, 1.0x when the job runs as fast as its own writes; Gelem/s: elements quantized a second"
if [ "$BOUND" = 1 ]; then
    # no decoding: what reading bf16, the amax and quantizing passes and the
    # writes cost alone. It reads 2 bytes an element where FP8 reads 1 and
    # INT4/MXFP4 half of one, but decodes nothing: the elements/s of a
    # quantized source's whole job cannot pass it by much.
    d=$(synth bf16 4)
    tq=$(timed quant "$d")
    el=$(elements "$OUT"); rm -rf "$OUT"; drop bf16 4
    awk -v e="$el" -v q="$tq" 'BEGIN{ g = e / q / 1e9
        printf "bound: the bf16 synth (4 layers) quantizes %.2f G elements/s end to end: about %.2f GB/s of a\n", g, g
        printf "       1-byte source (FP8) and %.2f GB/s of a half-byte one (INT4, MXFP4) on these threads\n", g / 2 }'
fi

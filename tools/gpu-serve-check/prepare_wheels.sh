#!/usr/bin/env bash
# Prepares, here on the CPU machine, everything the H200 host needs for the vLLM GPU check
# (issue 20) and lays it out as carries of < 64 MiB each, under STAGE (git-ignored: never
# commit it):
#   STAGE/p1/ff.tar.gz        fp4forge (build/fp4forge) and the shared libraries it links
#                             that are not glibc's (the H200 image has no libjansson/libcurl
#                             for sure), so the device makes its own models (device_prepare.sh)
#   STAGE/pN/set.tar.NN       one byte range of one tar stream of: wheels/*.whl (vLLM 0.26.0
#                             trimmed and without its 3 large CUDA extensions + the runtime
#                             imports the image lacks), then big/*.gz (those extensions)
# The wheels come first in the stream and all fit in p1, so call 1 installs and import-checks
# them; the extensions complete in the last part. The H200 image (KINDS.md) already has
# torch 2.11.0+cu130, transformers 5.17, numpy, triton, aiohttp, opencv-headless, uvloop,
# grpcio, httpx, pillow, tiktoken, ...
# usage: prepare_wheels.sh [STAGE]   (default: <repo>/.gsc; README.md beside this: the calls)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
STAGE=${1:-$repo/.gsc}
WORK=${WORK:-/var/tmp/ff-gpu}
DL=$WORK/dl
VLLM_VERSION=${VLLM_VERSION:-0.26.0}
PART_MIB=${PART_MIB:-61}      # one carry: 64 MiB minus the repo (~1 MiB) and slack
mkdir -p "$DL"
plat=""
for n in 2_17 2_24 2_27 2_28 2_31 2_34 2_35 2_39; do plat+=" --platform manylinux_${n}_x86_64"; done
plat+=" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64"
pdl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
          --implementation cp --abi cp312 --abi abi3 --abi none $plat -d "$DL" "$@"; }

pdl "vllm==$VLLM_VERSION"
# vLLM's runtime requirements that the image lacks, and theirs (pins from vLLM's METADATA).
# Left out on purpose (serving front-end, or kernels for other chips / backends that an
# offline H200 run with Marlin never imports): flashinfer-python, tilelang,
# nvidia-cutlass-dsl (so no FA4: Gemma-4 falls back to TRITON_ATTN), quack-kernels,
# humming-kernels, tokenspeed-mla, PyNvVideoCodec, torchcodec, fastsafetensors,
# nvidia-cudnn-frontend, anthropic, mcp, opentelemetry-*, model-hosting-container-standards.
pdl -r "$here/requirements-gpu.txt"

rm -rf "$WORK/set" "$STAGE"
mkdir -p "$WORK/set/wheels" "$WORK/set/big" "$STAGE/p1"
for w in "$DL"/*.whl; do
  case $(basename "$w") in
    vllm-*) [[ $w == *"vllm-$VLLM_VERSION-"* ]] || continue ;;
  esac
  python3 "$here/trim_wheels.py" "$w" "$WORK/set/wheels" "$WORK/set/big"
done
# one version of each distribution, or pip --target stops
dups=$(ls "$WORK/set/wheels" | sed 's/-[0-9].*//' | tr 'A-Z_.' 'a-z--' | sort | uniq -d)
[ -z "$dups" ] || { echo "two versions of: $dups" >&2; exit 1; }

# fp4forge and its non-glibc shared libraries
ff=$WORK/ff; rm -rf "$ff"; mkdir -p "$ff/lib"
cp "$repo/build/fp4forge" "$ff/"
ldd "$repo/build/fp4forge" | awk '/=>/ {print $3}' \
  | grep -v -E '/(libc|libm|libresolv|libpthread|libdl|librt|ld-linux[^/]*)\.so' \
  | while read -r l; do cp -L "$l" "$ff/lib/"; done
tar czf "$STAGE/p1/ff.tar.gz" -C "$ff" .

# the stream: wheels first, then the big extensions; split into parts
(cd "$WORK/set" && tar cf "$WORK/set.tar" wheels big)
total=$(stat -c %s "$WORK/set.tar")
limit=$((PART_MIB * 1024 * 1024))
first=$((limit - $(stat -c %s "$STAGE/p1/ff.tar.gz")))
off=0; n=1
while [ "$off" -lt "$total" ]; do
  size=$limit; [ "$n" = 1 ] && size=$first
  mkdir -p "$STAGE/p$n"
  dd if="$WORK/set.tar" of="$STAGE/p$n/set.tar.$(printf %02d $n)" bs=1M status=none \
     iflag=skip_bytes,count_bytes skip="$off" count="$size"
  off=$((off + size)); n=$((n + 1))
done
wheels_end=$(cd "$WORK/set" && tar cf - wheels | wc -c)
# checked on the device once every part has arrived (device_run.sh)
(cd "$STAGE" && for f in p*/set.tar.*; do (cd "$(dirname "$f")" && sha256sum "$(basename "$f")"); done \
   > SHA256SUMS && cp SHA256SUMS "p$((n - 1))/")
echo "stream $((total / 1048576)) MiB in $((n - 1)) parts; the wheels end at $((wheels_end / 1048576)) MiB (p1 holds $((first / 1048576)) MiB)"
du -sh "$STAGE"/p* && ls -la "$STAGE"/p*

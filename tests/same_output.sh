#!/usr/bin/env bash
# same_output.sh A B: two quantized outputs hold the same files, byte for
# byte. The model card (README.md) is compared without its title and its
# `vllm serve` line: they name the input and the output as the user named
# them, so runs into other folders differ there and only there.
# Prints the differing names (and '(missing)'); exit 1 when any differ.
set -u
card() { grep -v -e '^vllm serve ' -e '^# .* NVFP4A16$' -e '^# NVFP4A16 checkpoint$' "$1"; }
bad=""
for f in "$1"/* "$2"/*; do
    b=$(basename "$f")
    { [ -e "$1/$b" ] && [ -e "$2/$b" ]; } || { case "$bad" in *" $b(missing)"*) ;; *) bad="$bad $b(missing)";; esac; continue; }
done
for f in "$1"/*; do
    b=$(basename "$f")
    [ -e "$2/$b" ] || continue
    if [ "$b" = README.md ]; then cmp -s <(card "$f") <(card "$2/$b") || bad="$bad $b"
    else cmp -s "$f" "$2/$b" || bad="$bad $b"; fi
done
[ -z "$bad" ] && exit 0
echo "${bad# }"
exit 1

#!/usr/bin/env bash
# Two fp4forge binaries that must behave the same (a refactor; a family's C table turned into
# a description): for every synth preset (tiny) and every checkpoint folder given, plan --json
# and inspect --json of the source, and with --quantize also the quantized files (sha256 of
# each, the card's path line aside), inspect --json, verify --against --json and diff --json
# of the output, old against new. Prints "same X" / "DIFF X" and exits 1 on any DIFF.
#   bash tools/compare-binaries.sh OLD NEW WORKDIR [--quantize] [--no-presets] [DIR...]
# A baseline binary: git worktree add /tmp/base HEAD~1 && make -C /tmp/base B=/tmp/base/build
set -uo pipefail
OLD=$(realpath "$1"); NEW=$(realpath "$2"); W=$3; shift 3
QUANT=0 PRESETS=1 DIRS=()
for a in "$@"; do
    case $a in --quantize) QUANT=1 ;; --no-presets) PRESETS=0 ;; *) DIRS+=("$(realpath "$a")") ;; esac
done
rm -rf "$W"; mkdir -p "$W/old" "$W/new"
bad=0
# same NAME CMD-ARGS...: the command's output from both binaries ({} is old/ or new/ in paths)
same() {
    local name=$1; shift
    "$OLD" "${@//"{}"/old}" > "$W/$name.old" 2>&1
    "$NEW" "${@//"{}"/new}" > "$W/$name.new" 2>&1
    sed -i "s#$W/new/#$W/old/#g" "$W/$name.new"
    if cmp -s "$W/$name.old" "$W/$name.new"; then echo "same $name"; else echo "DIFF $name"; bad=1; fi
}
inputs=()
if [ $PRESETS = 1 ]; then
    for p in $("$NEW" synth --help | awk '/^presets/{f=1;next} f&&NF{print $1}'); do
        "$NEW" synth --arch "$p" "$W/src-$p" > /dev/null 2>&1 && inputs+=("$W/src-$p")
    done
fi
inputs+=("${DIRS[@]}")
for src in "${inputs[@]}"; do
    n=$(basename "$src")
    same "plan-$n" plan "$src" --json
    same "inspect-$n" inspect "$src" --json
    [ $QUANT = 1 ] || continue
    "$OLD" quantize "$src" "$W/old/$n" --no-doctor --quiet > /dev/null 2>&1
    "$NEW" quantize "$src" "$W/new/$n" --no-doctor --quiet > /dev/null 2>&1
    sed -i "s#$W/new/#$W/old/#g" "$W/new/$n/README.md" 2>/dev/null
    if diff <(cd "$W/old/$n" 2>/dev/null && sha256sum ./*) <(cd "$W/new/$n" 2>/dev/null && sha256sum ./*) > /dev/null &&
       [ -d "$W/old/$n" ]; then echo "same quantize-$n"; else echo "DIFF quantize-$n"; bad=1; fi
    same "qinspect-$n" inspect "$W/{}/$n" --json
    same "verify-$n" verify "$W/{}/$n" --against "$src" --json
    same "diff-$n" diff "$W/{}/$n" "$src" --json
    rm -rf "$W/old/$n" "$W/new/$n"   # real-size outputs would fill the disk
done
exit $bad

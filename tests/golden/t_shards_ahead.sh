#!/usr/bin/env bash
# Many shards (issue 39): the folder's *.safetensors are opened on up to 4
# threads while the index is parsed (src/io/checkpoint.c read_shards). The
# result must be what one thread in index order gives: the same plan and
# bytes as the one-shard copy, the first bad shard in index order named
# whichever thread met it, a file the index does not name never read into
# the checkpoint, a shard the index names but the folder lacks named.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/shards_ahead; rm -rf "$W"; mkdir -p "$W"
$FF_FAST synth --arch qwen3-moe "$W/one" > /dev/null || { fail shards_ahead_synth; exit 1; }
$FF_FAST synth --arch qwen3-moe --shard-size 400KB "$W/many" > /dev/null || { fail shards_ahead_synth_many; exit 1; }
n=$(ls "$W/many"/*.safetensors | wc -l)
[ "$n" -ge 8 ] && pass shards_ahead_many "$n shards, read ahead from 8" || fail shards_ahead_many "only $n shards"

# plan --json without its first key, the folder it read
plan_json() { $FF plan "$1" --json 2>&1 | grep -v '^  "checkpoint": '; return "${PIPESTATUS[0]}"; }
plan_json "$W/one" > "$W/one.json"
plan_json "$W/many" > "$W/many.json"; rc=$?
[ $rc -eq 0 ] && cmp -s "$W/one.json" "$W/many.json" && pass shards_ahead_same_plan "plan --json of $n shards == of one" \
    || fail shards_ahead_same_plan "rc=$rc; $(diff "$W/one.json" "$W/many.json" | head -3 | tr '\n' ' ')"
$FF_FAST quantize "$W/one" "$W/q1" --no-doctor --quiet > /dev/null 2>&1
$FF quantize "$W/many" "$W/qn" --no-doctor --quiet > /dev/null 2>&1; rc=$?
same=1
python3 - "$W/q1" "$W/qn" << 'PY' || same=0
import json, struct, sys, glob
def tensors(d):
    out = {}
    for p in glob.glob(d + "/*.safetensors"):
        b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k != "__metadata__":
                out[k] = (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
    return out
sys.exit(0 if tensors(sys.argv[1]) == tensors(sys.argv[2]) else 1)
PY
[ $rc -eq 0 ] && [ $same = 1 ] && pass shards_ahead_same_bytes "quantize of $n shards: every tensor equal to the one-shard run's" \
    || fail shards_ahead_same_bytes "rc=$rc same=$same"

# a file the index does not name: not part of the checkpoint, even when broken
cp -r "$W/many" "$W/stray"; printf 'not a safetensors file' > "$W/stray/consolidated.safetensors"
plan_json "$W/stray" > "$W/stray.json"; rc=$?
[ $rc -eq 0 ] && cmp -s "$W/one.json" "$W/stray.json" && pass shards_ahead_stray_file_ignored "a broken consolidated.safetensors beside the index: rc=0, same plan" \
    || fail shards_ahead_stray_file_ignored "rc=$rc: $(head -2 "$W/stray.json" | tr '\n' ' ')"

# two broken shards: the first in index order is named, every time
cp -r "$W/many" "$W/bad"
mapfile -t order < <(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["weight_map"]; s=[]; [s.append(v) for v in m.values() if v not in s]; print("\n".join(s))' "$W/bad/model.safetensors.index.json")
first=${order[2]} later=${order[$((${#order[@]} - 2))]}
truncate -s 100 "$W/bad/$first"; truncate -s 100 "$W/bad/$later"
ok=1
for i in 1 2 3 4 5; do
    $FF plan "$W/bad" > "$W/bad.out" 2>&1; rc=$?
    { [ $rc -ne 0 ] && grep -q "$first" "$W/bad.out" && ! grep -q "$later" "$W/bad.out"; } || ok=0
done
[ $ok = 1 ] && pass shards_ahead_first_bad_named "5 runs: rc=$rc, $(head -1 "$W/bad.out" | cut -c1-150)" \
    || fail shards_ahead_first_bad_named "rc=$rc: $(head -2 "$W/bad.out" | tr '\n' ' ')"

# the index names a shard the folder lacks
cp -r "$W/many" "$W/gone"; rm "$W/gone/${order[4]}"
$FF plan "$W/gone" > "$W/gone.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "${order[4]}" "$W/gone.out" && pass shards_ahead_missing_shard_named "rc=$rc: $(head -1 "$W/gone.out" | cut -c1-150)" \
    || fail shards_ahead_missing_shard_named "rc=$rc: $(head -2 "$W/gone.out" | tr '\n' ' ')"
exit $GOLDEN_RC

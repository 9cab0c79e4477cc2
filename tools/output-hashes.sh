#!/usr/bin/env bash
# sha256 of every file that quantize, dequantize, merge and synth write, on the
# real fixtures and on synthetic checkpoints: run before and after a refactor
# that must not change behaviour, and diff the two lists.
#   bash tools/output-hashes.sh BIN WORKDIR > hashes.txt
set -euo pipefail
BIN=$(realpath "$1"); W=$2
FIX=${FIXTURES:-$(cd "$(dirname "$0")/../.." && pwd)/shared/fixtures}
rm -rf "$W"; mkdir -p "$W"; cd "$W"
for a in dense moe; do
    mkdir -p fx-$a && tar -xzf "$FIX/gemma4-tiny-$a.tar.gz" -C fx-$a
    src=$(dirname "$(find fx-$a -name config.json | head -1)")
    "$BIN" quantize "$src" q-fx-$a --no-doctor --quiet > /dev/null
    "$BIN" dequantize q-fx-$a dq-fx-$a > /dev/null
done
"$BIN" synth s-dense > /dev/null
"$BIN" synth --arch gemma4-moe s-moe > /dev/null
"$BIN" synth --schema legacy --no-k-eq-v --ple 16 s-legacy > /dev/null
"$BIN" synth --size real --sparse --layers 2 s-sparse > /dev/null
for s in s-dense s-moe s-legacy; do
    "$BIN" quantize $s q-$s --no-doctor --quiet --shard-size 10MB > /dev/null
    "$BIN" dequantize q-$s dq-$s > /dev/null
done
# a deterministic LoRA adapter for merge and quantize --lora
python3 - s-dense <<'PY'
import json, os, random, struct, sys
b = open(f"{sys.argv[1]}/model.safetensors", "rb").read()
hdr = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
random.seed(0); os.makedirs("adapter", exist_ok=True)
ts, data, off = {}, b"", 0
for m in ["model.language_model.layers.0.self_attn.q_proj", "model.language_model.layers.1.mlp.down_proj"]:
    out, inn = hdr[m + ".weight"]["shape"]
    for k, s in (("lora_A", [4, inn]), ("lora_B", [out, 4])):
        raw = struct.pack("<%df" % (s[0] * s[1]), *[random.gauss(0, 0.05) for _ in range(s[0] * s[1])])
        ts[f"base_model.model.{m}.{k}.weight"] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + len(raw)]}
        data += raw; off += len(raw)
hj = json.dumps(ts).encode()
open("adapter/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + data)
json.dump({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "down_proj"], "bias": "none"},
          open("adapter/adapter_config.json", "w"))
PY
"$BIN" merge s-dense adapter m-dense > /dev/null
"$BIN" quantize s-dense ql-dense --lora adapter --no-doctor --quiet > /dev/null
find . -type f ! -path './fx-*' ! -path './adapter/*' | LC_ALL=C sort | xargs sha256sum

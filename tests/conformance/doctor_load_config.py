"""Loads a checkpoint folder's config.json with transformers' Gemma-4 config
class and checks, layer by layer, that the head_dim and KV heads transformers
derives match the k_proj / q_proj shapes in the safetensors header.
Usage: doctor_load_config.py DIR [--expect-mismatch]. Exit 0 when the
outcome is the expected one; prints one reason line."""
import json
import os
import struct
import sys

from transformers import Gemma4Config


def header(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with open(os.path.join(d, f), "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                out.update(json.loads(fh.read(n)))
    out.pop("__metadata__", None)
    return out


def mismatches(d):
    cfg = Gemma4Config.from_pretrained(d)
    t = cfg.text_config
    h = header(d)
    bad = []
    for i, kind in enumerate(t.layer_types):
        lc = t.per_layer_config[i]
        hd, kv = lc.head_dim, lc.num_key_value_heads
        pre = f"model.language_model.layers.{i}.self_attn."
        q = h[pre + "q_proj.weight"]["shape"][0]
        k = h[pre + "k_proj.weight"]["shape"][0]
        if q != t.num_attention_heads * hd or k != kv * hd:
            bad.append(f"layer {i} ({kind}): transformers says head_dim {hd} x {kv} KV heads, "
                       f"tensors have q rows {q}, k rows {k}")
    return bad


def main():
    d = sys.argv[1]
    expect_bad = "--expect-mismatch" in sys.argv[2:]
    try:
        bad = mismatches(d)
    except Exception as ex:  # a config transformers refuses counts as a mismatch
        bad = [f"load failed: {type(ex).__name__}: {ex}"]
    print(bad[0] if bad else "every layer's geometry matches the tensors")
    sys.exit(0 if bool(bad) == expect_bad else 1)


if __name__ == "__main__":
    main()

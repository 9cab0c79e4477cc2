"""make_adapter.py CHECKPOINT_DIR MODULE OUT_DIR: a minimal PEFT LoRA adapter
(rank 4, alpha 8, F32, seeded) for MODULE of the checkpoint's model.safetensors,
written as peft saves one (adapter_model.safetensors, adapter_config.json).
Shared by the golden tests that merge."""
import json, os, random, struct, sys

ckpt, m, out_dir = sys.argv[1:4]
random.seed(0)
b = open(os.path.join(ckpt, "model.safetensors"), "rb").read()
hdr = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
out, inn = hdr[m + ".weight"]["shape"]
ts = {f"base_model.model.{m}.lora_A.weight": [4, inn], f"base_model.model.{m}.lora_B.weight": [out, 4]}
h, data = {}, b""
for k, shape in ts.items():
    raw = struct.pack("<%df" % (shape[0] * shape[1]), *[random.gauss(0, 0.05) for _ in range(shape[0] * shape[1])])
    h[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
os.makedirs(out_dir, exist_ok=True)
hj = json.dumps(h).encode()
open(os.path.join(out_dir, "adapter_model.safetensors"), "wb").write(struct.pack("<Q", len(hj)) + hj + data)
json.dump({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": [m.rsplit(".", 1)[-1]], "bias": "none"},
          open(os.path.join(out_dir, "adapter_config.json"), "w"))

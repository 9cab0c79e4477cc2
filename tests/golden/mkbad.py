"""Makes malformed copies of a good checkpoint folder (plain python3, no torch):
truncated, header-lies, overlap, bad-json, nan-weight, nan-kept (a NaN in a norm
that is copied, not quantized), numel-overflow, overlap-empty (an empty tensor
hiding an overlap). Usage: mkbad.py GOOD OUTROOT"""
import json, os, shutil, struct, sys

good, root = sys.argv[1], sys.argv[2]


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write(path, header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    h += b" " * (-len(h) % 8)      # keep the data section aligned, as real writers do
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)


def variant(name):
    d = os.path.join(root, name)
    shutil.copytree(good, d)
    return d, os.path.join(d, "model.safetensors")


hdr, data = read(os.path.join(good, "model.safetensors"))
names = [k for k in hdr if k != "__metadata__"]

d, p = variant("truncated")
open(p, "r+b").truncate(os.path.getsize(p) - 1000)

d, p = variant("header-lies")
b = open(p, "rb").read()
open(p, "wb").write(struct.pack("<Q", len(b) * 2) + b[8:])

d, p = variant("overlap")
h = dict(hdr)
a, c = sorted(names, key=lambda k: h[k]["data_offsets"][0])[:2]
ea = dict(h[c]); s, e = h[a]["data_offsets"]
ea["data_offsets"] = [s, s + (ea["data_offsets"][1] - ea["data_offsets"][0])]
h[c] = ea
write(p, h, data)

d, p = variant("bad-json")
write(p, None, data, raw_header=json.dumps(hdr).encode()[:-7])

d, p = variant("nan-weight")
q = [k for k in names if k.endswith("mlp.down_proj.weight")][0]
s, e = hdr[q]["data_offsets"]
buf = bytearray(data)
buf[s + 2:s + 4] = b"\xc0\x7f"          # bf16 NaN at element 1
write(p, hdr, bytes(buf))

d, p = variant("nan-kept")
k = [n for n in names if n.endswith("input_layernorm.weight")][0]
s2, e2 = hdr[k]["data_offsets"]
buf = bytearray(data)
buf[s2 + 4:s2 + 6] = b"\x80\x7f"       # bf16 +Inf at element 2 of a kept norm
write(p, hdr, bytes(buf))

d, p = variant("numel-overflow")
h = dict(hdr)
h["zz.overflow"] = {"dtype": "BF16", "shape": [2**62, 2], "data_offsets": [0, 0]}
write(p, h, data)

d, p = variant("overlap-empty")
h = dict(hdr)
big = max(names, key=lambda k: h[k]["data_offsets"][1] - h[k]["data_offsets"][0])
s3, e3 = h[big]["data_offsets"]
h["zz.empty"] = {"dtype": "BF16", "shape": [0], "data_offsets": [s3 + 10, s3 + 10]}
inner = dict(h[k]); n2 = inner["data_offsets"][1] - inner["data_offsets"][0]
inner["data_offsets"] = [s3 + 64, s3 + 64 + n2]
h[k] = inner
write(p, h, data)
print(q, k)

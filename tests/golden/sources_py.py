"""Plain python3 (no torch) for t_sources.sh: an independent decoder of a
compressed-tensors INT4 / MXFP4 weight to compare fp4forge's with, byte
equality of named tensors between two folders, and hostile copies of a
quantized source (one thing broken each).
and transformers' bf16 gpt-oss layout rebuilt from a per-expert bf16 copy.
Usage: sources_py.py decode SRC DEC NAME... | same A B NAME... | same-all A B | bad GOOD OUT KIND |
       fuse-gptoss DEC OUT [down_untransposed]"""
import json, math, os, shutil, struct, sys

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def tensor(d, name):
    h, data = read(os.path.join(d, "model.safetensors"))
    s, e = h[name]["data_offsets"]
    return h[name], data[s:e]


def bf16_bits(x):
    """round-to-nearest-even f32 -> bf16 (x is exactly an f32 product here)"""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_val(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def decode(src, mod):
    """bf16 bits of <mod>.weight, from its stored parts"""
    hp, packed = tensor(src, mod + ".weight_packed")
    hs, scales = tensor(src, mod + ".weight_scale")
    rows, groups = hs["shape"]
    out = []
    if hp["dtype"] == "I32":   # INT4, bf16 scales: value i is nibble i%8 of word i/8, minus 8
        cols = groups * 32
        for r in range(rows):
            for c in range(cols):
                w = struct.unpack_from("<I", packed, (r * cols // 8 + c // 8) * 4)[0]
                q = ((w >> (4 * (c % 8))) & 15) - 8
                s = bf16_val(struct.unpack_from("<H", scales, (r * groups + c // 32) * 2)[0])
                out.append(bf16_bits(q * s))
    else:                      # MXFP4: low nibble first, 2^(e-127)
        cols = groups * 32
        for r in range(rows):
            for c in range(cols):
                b = packed[(r * cols + c) // 2]
                code = b & 15 if c % 2 == 0 else b >> 4
                v = E2M1[code & 7] * (-1 if code & 8 else 1)
                out.append(bf16_bits(v * math.ldexp(1.0, scales[r * groups + c // 32] - 127)))
    return struct.pack("<%dH" % len(out), *out)


def bad(good, out, kind):
    shutil.copytree(good, out)
    p = os.path.join(out, "model.safetensors")
    h, data = read(p)
    data = bytearray(data)
    fp8 = kind.startswith("fp8_")
    suffix = ".weight_scale_inv" if fp8 else ".weight_packed"
    kind, _, mod = kind.partition(":")   # KIND:MODULE names the module; else the first by name
    mod = mod or sorted(k[:-len(suffix)] for k in h if k.endswith(suffix))[0]
    cfg = json.load(open(os.path.join(out, "config.json")))
    qc = cfg.get("quantization_config") or cfg["text_config"]["quantization_config"]
    if kind == "fp8_nan_byte":   # E4M3 0xff (NaN) at element 77 of an FP8 weight
        s, _ = h[mod + ".weight"]["data_offsets"]
        data[s + 77] = 0xFF
    elif kind == "fp8_nan_low_block":   # 0xff in the smallest-scale block, away from the
        # top-scale block whose 448 gives the amax: found by the quantizing pass
        rows, cols = h[mod + ".weight"]["shape"]
        sr, sc = h[mod + ".weight_scale_inv"]["shape"]
        s0, _ = h[mod + ".weight_scale_inv"]["data_offsets"]
        scales = struct.unpack_from("<%df" % (sr * sc), data, s0)
        low = min(range(sr * sc), key=lambda i: abs(scales[i]))
        elem = (low // sc * 128 + 5) * cols + low % sc * 128 + 3
        s, _ = h[mod + ".weight"]["data_offsets"]
        data[s + elem] = 0xFF
        mod = "weight: element %d is NaN or Inf" % elem
    elif kind == "fp8_inf_scale":  # an infinite block scale: its block decodes to Inf and NaN
        s, _ = h[mod + ".weight_scale_inv"]["data_offsets"]
        struct.pack_into("<f", data, s, float("inf"))
    elif kind == "nan_scale":      # bf16 NaN in an INT4 scale
        s, _ = h[mod + ".weight_scale"]["data_offsets"]
        data[s:s + 2] = struct.pack("<H", 0x7FC0)
    elif kind == "e8m0_255":
        s, _ = h[mod + ".weight_scale"]["data_offsets"]
        data[s] = 255
    elif kind == "shape_lies":   # weight_shape says twice the columns
        s, _ = h[mod + ".weight_shape"]["data_offsets"]
        r, c = struct.unpack_from("<qq", data, s)
        struct.pack_into("<qq", data, s, r, 2 * c)
    elif kind == "bits_8":
        qc["config_groups"]["group_0"]["weights"]["num_bits"] = 8
    elif kind == "no_scale":     # a weight_packed without its weight_scale
        del h[mod + ".weight_scale"]
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(data))
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
    print(mod)


def write(path, tensors):
    """tensors: name -> (dtype, shape, bytes), in name order"""
    h, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, b = tensors[k]
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def fuse_gptoss(dec, out, kind):
    """GptOssExperts' own parameters (used as x @ W): gate_up_proj [E, H, 2I] with
    gate the even columns and up the odd ones, down_proj [E, I, H], biases fused
    the same way; kind down_untransposed stores down_proj [E, H, I] (a lie)"""
    h, data = read(os.path.join(dec, "model.safetensors"))
    get = lambda k: data[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]
    el = lambda b, i: b[2 * i:2 * i + 2]
    t = {k: (v["dtype"], v["shape"], get(k)) for k, v in h.items() if k != "__metadata__" and ".experts." not in k}
    layers = sorted({k.split(".experts.")[0] for k in h if ".experts." in k})
    for p in layers:
        E = 1 + max(int(k[len(p) + 9:].split(".")[0]) for k in h if k.startswith(p + ".experts."))
        I, H = h[f"{p}.experts.0.gate_proj.weight"]["shape"]
        gu, gub, dn, dnb = bytearray(), bytearray(), bytearray(), bytearray()
        for e in range(E):
            g, u = get(f"{p}.experts.{e}.gate_proj.weight"), get(f"{p}.experts.{e}.up_proj.weight")
            gu += b"".join(el(g if j % 2 == 0 else u, (j // 2) * H + c) for c in range(H) for j in range(2 * I))
            gb, ub = get(f"{p}.experts.{e}.gate_proj.bias"), get(f"{p}.experts.{e}.up_proj.bias")
            gub += b"".join(el(gb if j % 2 == 0 else ub, j // 2) for j in range(2 * I))
            d = get(f"{p}.experts.{e}.down_proj.weight")
            dn += d if kind == "down_untransposed" else b"".join(el(d, r * I + c) for c in range(I) for r in range(H))
            dnb += get(f"{p}.experts.{e}.down_proj.bias")
        t[p + ".experts.gate_up_proj"] = ("BF16", [E, H, 2 * I], bytes(gu))
        t[p + ".experts.gate_up_proj_bias"] = ("BF16", [E, 2 * I], bytes(gub))
        t[p + ".experts.down_proj"] = ("BF16", [E, H, I] if kind == "down_untransposed" else [E, I, H], bytes(dn))
        t[p + ".experts.down_proj_bias"] = ("BF16", [E, H], bytes(dnb))
    os.makedirs(out)
    write(os.path.join(out, "model.safetensors"), t)
    cfg = json.load(open(os.path.join(dec, "config.json")))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
    print(f"{len(layers)} layers fused")


def same_all(a, b):
    ha, da = read(os.path.join(a, "model.safetensors"))
    hb, db = read(os.path.join(b, "model.safetensors"))
    ka, kb = set(ha) - {"__metadata__"}, set(hb) - {"__metadata__"}
    cut = lambda h, d, k: d[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]
    diff = sorted(ka ^ kb) + sorted(k for k in ka & kb if ha[k]["shape"] != hb[k]["shape"] or
                                    ha[k]["dtype"] != hb[k]["dtype"] or cut(ha, da, k) != cut(hb, db, k))
    print("differ: " + " ".join(diff[:5]) if diff else f"equal {len(ka)}")


if sys.argv[1] == "decode":
    src, dec = sys.argv[2], sys.argv[3]
    bad_names = [m for m in sys.argv[4:] if tensor(dec, m + ".weight")[1] != decode(src, m)]
    print("differ: " + " ".join(bad_names) if bad_names else "equal")
elif sys.argv[1] == "same":
    a, b = sys.argv[2], sys.argv[3]
    diff = [n for n in sys.argv[4:] if tensor(a, n)[1] != tensor(b, n)[1]]
    print("differ: " + " ".join(diff) if diff else "equal")
elif sys.argv[1] == "same-all":
    same_all(sys.argv[2], sys.argv[3])
elif sys.argv[1] == "fuse-gptoss":
    fuse_gptoss(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
elif sys.argv[1] == "bad":
    bad(sys.argv[2], sys.argv[3], sys.argv[4])

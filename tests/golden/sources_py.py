"""Plain python3 (no torch) for t_sources.sh: an independent decoder of a
compressed-tensors INT4 / MXFP4 weight to compare fp4forge's with, byte
equality of named tensors between two folders, and hostile copies of a
quantized source (one thing broken each).
Usage: sources_py.py decode SRC DEC NAME... | same A B NAME... | bad GOOD OUT KIND"""
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
    mod = sorted(k[:-len(suffix)] for k in h if k.endswith(suffix))[0]
    cfg = json.load(open(os.path.join(out, "config.json")))
    qc = cfg.get("quantization_config") or cfg["text_config"]["quantization_config"]
    if kind == "fp8_nan_byte":   # E4M3 0xff (NaN) at element 77 of an FP8 weight
        s, _ = h[mod + ".weight"]["data_offsets"]
        data[s + 77] = 0xFF
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


if sys.argv[1] == "decode":
    src, dec = sys.argv[2], sys.argv[3]
    bad_names = [m for m in sys.argv[4:] if tensor(dec, m + ".weight")[1] != decode(src, m)]
    print("differ: " + " ".join(bad_names) if bad_names else "equal")
elif sys.argv[1] == "same":
    a, b = sys.argv[2], sys.argv[3]
    diff = [n for n in sys.argv[4:] if tensor(a, n)[1] != tensor(b, n)[1]]
    print("differ: " + " ".join(diff) if diff else "equal")
elif sys.argv[1] == "bad":
    bad(sys.argv[2], sys.argv[3], sys.argv[4])

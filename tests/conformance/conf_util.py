"""What the conformance scripts share: reading a checkpoint folder's tensors,
comparing tensors bit for bit, and keeping the peers' log lines off stdout
(which carries the PASS/FAIL lines only)."""
import contextlib
import glob
import os
import sys

import torch
from safetensors import safe_open


def load_dir(d):
    """every tensor of every shard of folder d, by name"""
    out = {}
    for f in sorted(glob.glob(d + "/*.safetensors")):
        with safe_open(f, "pt") as fh:
            for k in fh.keys():
                out[k] = fh.get_tensor(k)
    return out


def desc(t):
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


def bits(t):
    """bitwise identity whatever the dtype (-0.0 vs 0.0 and NaN payloads count)"""
    return t.contiguous().view(torch.uint8).reshape(-1)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


@contextlib.contextmanager
def peers_quiet():
    """llm-compressor's loguru sink is sys.stdout; stdout here carries verdict lines only"""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)

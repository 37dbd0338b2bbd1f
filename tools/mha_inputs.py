#!/usr/bin/env python3
"""Writes a random self-attention layer and its input for `vkattn mha`, in
float16, with the standard library only (no numpy needed): OUT/x.npy (B, T, d) and OUT/p.npz (in_proj_weight
(3d, d), in_proj_bias (3d), out_proj.weight (d, d), out_proj.bias (d)),
weights uniform in +-1/sqrt(d) as PyTorch initialises them, x standard
normal. tools/gpu-check.sh times the layer on the cooperative matrices and
with --fp32-products from these files.

    tools/mha_inputs.py --out DIR [--b 1] [--t 1024] [--d 512] [--seed 1]
"""
import argparse
import io
import os
import random
import struct
import zipfile


def npy(shape, values, descr="<f2", fmt="e"):
    """The bytes of a .npy file (format 1.0) holding values in C order."""
    dims = ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    # The header, with its length prefix and magic, pads to 64 bytes and ends in a newline.
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    out = io.BytesIO()
    out.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
    out.write(struct.pack("<%d%s" % (len(values), fmt), *values))
    return out.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--t", type=int, default=1024)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = random.Random(a.seed)
    d = a.d
    bound = d ** -0.5

    def uniform(n):
        return [r.uniform(-bound, bound) for _ in range(n)]

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "x.npy"), "wb") as f:
        f.write(npy((a.b, a.t, d), [r.gauss(0, 1) for _ in range(a.b * a.t * d)]))
    with zipfile.ZipFile(os.path.join(a.out, "p.npz"), "w") as z:
        z.writestr("in_proj_weight.npy", npy((3 * d, d), uniform(3 * d * d)))
        z.writestr("in_proj_bias.npy", npy((3 * d,), uniform(3 * d), "<f4", "f"))
        z.writestr("out_proj.weight.npy", npy((d, d), uniform(d * d)))
        z.writestr("out_proj.bias.npy", npy((d,), uniform(d), "<f4", "f"))


if __name__ == "__main__":
    main()

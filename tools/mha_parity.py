#!/usr/bin/env python3
"""PyTorch parity data for vkattn's multi-head attention (SEMANTICS.md §11).

Builds small torch.nn.MultiheadAttention layers (batch_first=True, eval mode,
dropout 0) with fixed seeds, runs them, and writes under testdata/mha/:

  CASE.npz               inputs and PyTorch's outputs (np.savez_compressed):
                           query (B,T,d); key (B,S,kdim), value (B,S,vdim)
                           only for cross-attention cases; key_padding_mask
                           (B,S) bool, true = padded; attn_mask (T,S) bool
                           (true = blocked) or (B*h,T,S) float (additive);
                           out (B,T,d); weights (B,h,T,S) per head
                           (average_attn_weights=False); weights_avg (B,T,S)
                           (average_attn_weights=True). Outputs are float64.
  CASE_grads.npz         a gradient dout (B,T,d), float32, and the gradients
                           of sum(out * dout) by autograd of the float64
                           module: query (key, value for cross-attention)
                           and every parameter as grad.NAME (NAME as in the
                           state_dict), float64
  CASE_params.npz        the layer's state_dict, float32 (np.savez, stored)
  CASE_params.safetensors  the same tensors as safetensors, written by hand
                           below (Debian has no python3-safetensors): 8-byte
                           little-endian header length, JSON header padded
                           with spaces to 8 bytes, raw little-endian data.

Inputs and weights are float32; the expected outputs come from the same
module run in float64 on those exact values (float32 -> float64 is exact), so
they are PyTorch's answer without float32 rounding; the script checks the
float32 run agrees to 1e-5. No case has a fully masked row: PyTorch returns
NaN there, where vkattn defines zeros.

The Go tests (weights/parity_test.go) read these files; they never run
Python. To regenerate (Debian bookworm; torch 1.13.1+dfsg-4 made the
committed files):

  apt-get update && apt-get install -y python3-torch python3-numpy
  /usr/bin/python3 tools/mha_parity.py        # from the repository root
"""

import json
import os
import struct
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "mha")


def write_safetensors(path, tensors):
    """Writes {name: float32 ndarray} in the safetensors format."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        data = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def run(mha, query, key, value, kpm, attn_mask):
    out, w = mha(query, key, value, key_padding_mask=kpm, attn_mask=attn_mask,
                 need_weights=True, average_attn_weights=False)
    _, w_avg = mha(query, key, value, key_padding_mask=kpm, attn_mask=attn_mask,
                   need_weights=True, average_attn_weights=True)
    return out, w, w_avg


def make_case(name, seed, d, h, B, T, S, kdim=None, vdim=None, bias=True,
              cross=False, kpm=None, attn_mask=None):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(d, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
    # Default init leaves the biases at zero; random biases test them.
    with torch.no_grad():
        for pname, p in mha.named_parameters():
            if "bias" in pname:
                p.normal_()
    mha.eval()
    query = torch.randn(B, T, d)
    if cross:
        key = torch.randn(B, S, kdim or d)
        value = torch.randn(B, S, vdim or d)
    else:
        key = value = query

    with torch.no_grad():
        out32, w32, avg32 = run(mha, query, key, value, kpm,
                                attn_mask.float() if attn_mask is not None and attn_mask.is_floating_point() else attn_mask)
        mha64 = mha.double()
        am = attn_mask.double() if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
        out, w, avg = run(mha64, query.double(), key.double(), value.double(), kpm, am)
    for a, b in ((out32, out), (w32, w), (avg32, avg)):
        assert torch.isfinite(b).all(), name + ": non-finite output (fully masked row?)"
        assert (a.double() - b).abs().max() < 1e-5, name + ": float32 and float64 runs disagree"

    arrays = {"query": query.numpy(), "out": out.numpy(), "weights": w.numpy(), "weights_avg": avg.numpy()}
    if cross:
        arrays["key"], arrays["value"] = key.numpy(), value.numpy()
    if kpm is not None:
        arrays["key_padding_mask"] = kpm.numpy()
    if attn_mask is not None:
        arrays["attn_mask"] = attn_mask.numpy()
    np.savez_compressed(os.path.join(OUT, name + ".npz"), **arrays)

    # Gradients of sum(out * dout) in float64, at the same float32 values;
    # dout comes from a generator of its own so the inputs stay as they were.
    dout = torch.randn(B, T, d, generator=torch.Generator().manual_seed(1000 + seed))
    leaves = {"query": query.double().requires_grad_()}
    if cross:
        leaves["key"], leaves["value"] = key.double().requires_grad_(), value.double().requires_grad_()
    else:
        leaves["key"] = leaves["value"] = leaves["query"]
    mha64.zero_grad()
    out, _ = mha64(leaves["query"], leaves["key"], leaves["value"], key_padding_mask=kpm, attn_mask=am, need_weights=False)
    (out * dout.double()).sum().backward()
    grads = {"dout": dout.numpy()}
    for k in (("query", "key", "value") if cross else ("query",)):
        grads["grad." + k] = leaves[k].grad.numpy()
    for pname, p in mha64.named_parameters():
        grads["grad." + pname] = p.grad.numpy()
    np.savez_compressed(os.path.join(OUT, name + "_grads.npz"), **grads)

    params = {k: v.float().numpy() for k, v in mha.state_dict().items()}
    np.savez(os.path.join(OUT, name + "_params.npz"), **params)
    write_safetensors(os.path.join(OUT, name + "_params.safetensors"), params)
    print(name, {k: tuple(v.shape) for k, v in params.items()})


def main():
    os.makedirs(OUT, exist_ok=True)
    print("torch", torch.__version__, "numpy", np.__version__, file=sys.stderr)

    # (a) SEMANTICS.md §11 walk-through: self-attention, packed in_proj_weight.
    make_case("self", seed=1, d=8, h=2, B=2, T=3, S=3)

    # (b) cross-attention, kdim and vdim differ from d: separate
    # q/k/v_proj_weight, packed in_proj_bias.
    make_case("cross", seed=2, d=8, h=2, B=2, T=3, S=5, kdim=5, vdim=6, cross=True)

    # (c) key padding + causal, self-attention. Causal needs T == S; batch
    # item 1 pads its last two keys, key 0 is never padded, so no row is
    # fully masked.
    T = 5
    kpm = torch.zeros(2, T, dtype=torch.bool)
    kpm[1, 3:] = True
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # true = blocked
    make_case("padcausal", seed=3, d=12, h=3, B=2, T=T, S=T, kpm=kpm, attn_mask=causal)

    # (d) additive float attn_mask (B*h, T, S), no biases, cross-attention
    # with kdim == vdim == d (packed weights) and a key padding mask.
    B, h, T, S = 2, 4, 4, 6
    g = torch.Generator().manual_seed(40)
    mask = torch.randn(B * h, T, S, generator=g)
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, 4:] = True
    make_case("mask3d", seed=4, d=16, h=h, B=B, T=T, S=S, bias=False, cross=True, kpm=kpm, attn_mask=mask)


if __name__ == "__main__":
    main()

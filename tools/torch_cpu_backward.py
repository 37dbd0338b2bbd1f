#!/usr/bin/env python3
"""Times PyTorch's CPU autograd of the math SDPA, forward and backward, on
the shapes given: the peer BENCHMARKS.md puts beside `vkattn bench
--backward` on the same machine in the same run.

    /usr/bin/python3 tools/torch_cpu_backward.py [--reps N] [--threads T] B,H,L,S,d[,causal] ...

Per shape: float32 Q (B,H,L,d), K and V (B,H,S,d) requiring gradients and a
fixed dO; a timed call is O = softmax(Q K^T / sqrt(d) [+ bottom-right causal
-inf]) V followed by O.backward(dO), the gradients cleared between calls.
One untimed warm-up call, then --reps timed ones (wall clock); the median is
reported. FLOPs are bench.go's for --backward: 3.5 x 4*B*H*L*S*d (the
forward's 4BHLSd and FlashAttention's 2.5x of it for the backward), halved
for causal rows; the math SDPA computes the whole masked matrix anyway.
Output: a JSON object per shape and line (shape, causal, ms, gflops, torch,
threads, blas: the BLAS libraries the process loaded). Debian 12: apt-get
install python3-torch (torch 1.13). That torch calls the libblas.so.3 of
Debian's alternatives, the reference BLAS unless another is installed;
OpenBLAS's, first on the library path, made it ~3x faster here:

    apt-get download libopenblas0-pthread && dpkg -x libopenblas0-pthread_*.deb ob
    LD_LIBRARY_PATH=ob/usr/lib/x86_64-linux-gnu/openblas-pthread /usr/bin/python3 tools/torch_cpu_backward.py ...

    /usr/bin/python3 tools/torch_cpu_backward.py --mha B,L,E,H [--reps N] [--threads T]

times a training step of nn.MultiheadAttention(E, H, batch_first=True)
instead, the peer of `vkattn bench --mha-train B,L,E,H` (`--suite
mha-train`: 4,128,256,8): float32 x (B,L,E) requiring gradients and a
fixed dY; a timed step is out, _ = mha(x, x, x, need_weights=False)
followed by out.backward(dY), the gradients cleared between steps
(PyTorch's own initialisation; x requires gradients, so the layer takes
its composite path, not the fused inference kernel). FLOPs are bench.go's: 3 x the dense
layers' 2*rows*in*out (the forward, then dX and dW) plus 3.5 x the
attention's 4*B*H*L*L*(E/H). Output: one JSON object (shape, ms, gflops,
torch, threads, blas).
"""

import argparse
import json
import math
import statistics
import time

import torch


def step(q, k, v, dout, mask):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask
    out = torch.softmax(scores, dim=-1) @ v
    out.backward(dout)


def median_ms(step, reps, clear):
    """The median wall time of reps calls of step after one untimed one."""
    times = []
    for rep in range(reps + 1):
        clear()
        start = time.perf_counter()
        step()
        if rep > 0:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def mha_train(spec, reps, threads):
    B, L, E, H = (int(x) for x in spec.split(","))
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.rand(B, L, E) * 2 - 1
    x.requires_grad_()
    dy = torch.rand(B, L, E) * 2 - 1

    def step():
        out, _ = mha(x, x, x, need_weights=False)
        out.backward(dy)

    def clear():
        mha.zero_grad(set_to_none=True)
        x.grad = None

    ms = median_ms(step, reps, clear)
    rows = B * L
    dense = 2 * rows * E * 3 * E + 2 * rows * E * E
    flops = 3 * dense + 3.5 * 4 * B * H * L * L * (E // H)
    print(json.dumps({"mha_train": [B, L, E, H], "ms": round(ms, 2), "gflops": round(flops / ms / 1e6, 2),
                      "torch": torch.__version__, "threads": threads, "blas": blas()}))


def blas():
    """The BLAS shared libraries mapped into this process."""
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in path.rsplit("/", 1)[-1]:
                libs.add(path)
    return sorted(libs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="*", help="B,H,L,S,d or B,H,L,S,d,causal")
    ap.add_argument("--mha", help="time an MHA training step of B,L,E,H instead")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.mha:
        mha_train(a.mha, a.reps, a.threads)
    elif not a.shapes:
        ap.error("give shapes B,H,L,S,d or --mha B,L,E,H")
    for spec in a.shapes:
        parts = spec.split(",")
        B, H, L, S, d = (int(x) for x in parts[:5])
        causal = len(parts) > 5 and parts[5] == "causal"
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, H, n, d, generator=g).requires_grad_() for n in (L, S, S))
        dout = torch.randn(B, H, L, d, generator=g)
        mask = None
        if causal:
            # Query t sees keys j <= t + S - L.
            t = torch.arange(L).unsqueeze(1)
            j = torch.arange(S).unsqueeze(0)
            mask = torch.zeros(L, S).masked_fill(j > t + S - L, float("-inf"))
        times = []
        for rep in range(a.reps + 1):
            for x in (q, k, v):
                x.grad = None
            start = time.perf_counter()
            step(q, k, v, dout, mask)
            if rep > 0:
                times.append(time.perf_counter() - start)
        ms = statistics.median(times) * 1e3
        flops = 3.5 * 4 * B * H * L * S * d / (2 if causal else 1)
        print(json.dumps({"shape": [B, H, L, S, d], "causal": causal, "ms": round(ms, 2),
                          "gflops": round(flops / ms / 1e6, 2), "torch": torch.__version__, "threads": a.threads, "blas": blas()}))


if __name__ == "__main__":
    main()

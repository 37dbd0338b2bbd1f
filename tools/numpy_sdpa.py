#!/usr/bin/env python3
"""Times float32 scaled dot-product attention written in numpy, the CPU peer
for `vkattn bench` on lavapipe.

    eval "$(tools/numpy-env.sh /tmp/numpy-env)"      # numpy + OpenBLAS (pthread)
    "$PYTHON" tools/numpy_sdpa.py                    # the default shapes
    "$PYTHON" tools/numpy_sdpa.py --shape 1,8,8,1024,1024,64 --causal --reps 3

What is timed is what a user would write, per (batch item, key/value head):

    s = q @ k.T;  s *= scale;  s += causal_bias
    s -= s.max(-1);  exp(s);  s /= s.sum(-1);  o = s @ v

with scale = 1/sqrt(d). The query heads that share a key/value head (query
head h reads K/V head h // (H/H_kv), SEMANTICS.md §1) are stacked into one
(G*L, d) matrix, so grouped-query decode is one small GEMM per K/V head
instead of G matrix-vector products; nothing repeats K or V. --batched uses
4-D np.matmul over all heads at once instead of the Python loop. The
causal mask is the bottom-right alignment vkattn's bench uses (query t sees
keys j <= t + S - L), applied as a precomputed 0/-inf bias (building the
mask is not timed). The matmuls run on OpenBLAS's threads; the softmax
passes are numpy ufuncs, on one thread.

FLOP count: bench.go's convention, so the numbers sit beside
`vkattn bench --json` ones: 4*B*H*L*S*d (2*B*H*L*S*(d_k+d_v), SEMANTICS.md
§16: Q K^T and P V, 2 flops per multiply-add), HALVED for every causal row
(bench.go's benchFLOPs halves whenever a causal mask is set, whatever L and
S are, because the kernel skips fully masked key tiles). numpy does not
skip anything: it computes the full L x S scores even when causal, so
"gflops" (bench's convention) understates the rate numpy actually ran at
by 2x on causal rows; "gflops_done" is the full count over the same time.

Output: one JSON object per line and shape: name (as bench's progress
names it), shape {B,H,H_kv,L,S,d}, causal (none|bottom-right), dtype,
seconds (median of --reps timed calls after --warmup untimed ones),
seconds_min, seconds_max, reps, flops, gflops, flops_done, gflops_done,
threads (OpenBLAS's own count, asked through its C API), impl, numpy, blas.
--list prints the shapes instead (tools/side-by-side.sh reads it).

OPENBLAS_NUM_THREADS defaults to 2 (this machine's cores) when unset.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")  # before numpy loads OpenBLAS

import numpy as np  # noqa: E402

# (B, H, H_kv, L, S, d, causal): the shapes of the side-by-side table.
DEFAULT_SHAPES = [
    (1, 8, 8, 1024, 1024, 64, False),
    (1, 8, 8, 1024, 1024, 64, True),
    (1, 8, 8, 4096, 4096, 64, False),
    (1, 8, 8, 4096, 4096, 64, True),
    (1, 8, 8, 1024, 1024, 128, False),
    (1, 8, 8, 1024, 1024, 128, True),
    (1, 32, 32, 1, 4096, 128, False),  # decode, multi-head
    (1, 32, 8, 1, 4096, 128, False),  # decode, grouped-query
]

# --quick: the same kinds, small enough for a smoke test in seconds.
QUICK_SHAPES = [
    (1, 2, 2, 128, 128, 64, False),
    (1, 2, 2, 128, 128, 64, True),
    (1, 4, 2, 1, 256, 64, False),
]


def case_name(b, h, hkv, l, s, d, causal):
    """The name bench.go's caseName gives the shape."""
    n = f"B={b} H={h}"
    if hkv != h:
        n += f" H_kv={hkv}"
    n += f" L={l} S={s} d={d}"
    if causal:
        n += " causal bottom-right"
    return n


def causal_bias(l, s):
    """0 where query t may see key j (j <= t + S - L), -inf elsewhere."""
    t = np.arange(l)[:, None]
    j = np.arange(s)[None, :]
    return np.where(j <= t + (s - l), np.float32(0), np.float32(-np.inf)).astype(np.float32)


def softmax_rows(x):
    """In-place softmax over the last axis."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def sdpa_per_head(q, k, v, scale, bias, out):
    b_, h, l, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = h // hkv
    for b in range(b_):
        for j in range(hkv):
            qg = q[b, j * g:(j + 1) * g].reshape(g * l, d)  # the G query heads of K/V head j
            sc = qg @ k[b, j].T  # (G*L, S)
            sc *= scale
            if bias is not None:
                sc.reshape(g, l, s)[...] += bias
            softmax_rows(sc)
            out[b, j * g:(j + 1) * g] = (sc @ v[b, j]).reshape(g, l, v.shape[3])
    return out


def sdpa_batched(q, k, v, scale, bias, out):
    b_, h, l, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = h // hkv
    sc = np.matmul(q.reshape(b_, hkv, g * l, d), k.transpose(0, 1, 3, 2))  # (B, H_kv, G*L, S)
    sc *= scale
    if bias is not None:
        sc.reshape(b_, hkv, g, l, s)[...] += bias
    softmax_rows(sc)
    out[...] = np.matmul(sc, v).reshape(b_, h, l, v.shape[3])
    return out


def reference(q, k, v, bias):
    """float64, one query head at a time, K/V head by h // G: the check."""
    b_, h, l, d = q.shape
    g = h // k.shape[1]
    o = np.empty(q.shape[:3] + (v.shape[3],))
    for b in range(b_):
        for i in range(h):
            sc = q[b, i].astype(np.float64) @ k[b, i // g].astype(np.float64).T / np.sqrt(d)
            if bias is not None:
                sc = sc + bias
            p = np.exp(sc - sc.max(axis=-1, keepdims=True))
            o[b, i] = (p / p.sum(axis=-1, keepdims=True)) @ v[b, i // g].astype(np.float64)
    return o


def blas_info():
    """The BLAS libraries mapped into this process and OpenBLAS's thread count."""
    libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps")
                   if ".so" in ln and ("blas" in ln or "lapack" in ln)})
    threads = None
    for path in libs:
        if "openblas" in os.path.basename(path):
            try:
                threads = int(ctypes.CDLL(path).openblas_get_num_threads())
            except (OSError, AttributeError):
                pass
            break
    return libs, threads


def parse_shape(text):
    vals = [int(x) for x in text.replace(";", ",").split(",") if x.strip()]
    if len(vals) != 6:
        raise argparse.ArgumentTypeError(f"{text!r}: want B,H,H_kv,L,S,d (6 integers)")
    b, h, hkv, l, s, d = vals
    if min(vals) < 1 or h % hkv:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be >= 1 and H_kv must divide H")
    return tuple(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=parse_shape, action="append",
                    help="B,H,H_kv,L,S,d instead of the default shapes (repeatable)")
    ap.add_argument("--causal", action="store_true", help="bottom-right causal mask on every --shape")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test); also QUICK=1")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per shape (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    ap.add_argument("--batched", action="store_true", help="4-D np.matmul over all heads, no Python loop")
    ap.add_argument("--check", action="store_true",
                    help="compare the first call with a float64 reference (slow on big shapes)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--list", action="store_true",
                    help="print the shapes, one 'B,H,H_kv,L,S,d causal|none' a line, and time nothing")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be at least 1")

    if args.shape:
        shapes = [s + (args.causal,) for s in args.shape]
    elif args.causal:
        ap.error("--causal applies to --shape; the default shapes say per shape whether they are causal")
    elif args.quick or os.environ.get("QUICK") == "1":
        shapes = QUICK_SHAPES
    else:
        shapes = DEFAULT_SHAPES

    if args.list:
        for b, h, hkv, l, s, d, causal in shapes:
            print(f"{b},{h},{hkv},{l},{s},{d} {'causal' if causal else 'none'}")
        return 0
    impl = sdpa_batched if args.batched else sdpa_per_head
    libs, threads = blas_info()
    if not any("openblas" in os.path.basename(p) for p in libs):
        print(f"numpy_sdpa: warning: OpenBLAS is not loaded (BLAS: {libs or 'none'}); "
              "see tools/numpy-env.sh", file=sys.stderr)
    rng = np.random.default_rng(args.seed)
    failed = False
    for b, h, hkv, l, s, d, causal in shapes:
        q = rng.standard_normal((b, h, l, d), dtype=np.float32)
        k = rng.standard_normal((b, hkv, s, d), dtype=np.float32)
        v = rng.standard_normal((b, hkv, s, d), dtype=np.float32)
        out = np.empty((b, h, l, d), np.float32)
        bias = causal_bias(l, s) if causal else None
        scale = np.float32(1 / np.sqrt(d))
        for i in range(args.warmup):
            impl(q, k, v, scale, bias, out)
        if args.check:
            impl(q, k, v, scale, bias, out)
            err = float(np.max(np.abs(out - reference(q, k, v, bias))))
            ok = err <= 1e-4
            failed |= not ok
            print(f"numpy_sdpa: {case_name(b, h, hkv, l, s, d, causal)}: max |O - ref64| = {err:.2e} "
                  f"{'ok' if ok else 'FAIL'}", file=sys.stderr)
        times = []
        for i in range(args.reps):
            t0 = time.perf_counter()
            impl(q, k, v, scale, bias, out)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        full = 4.0 * b * h * l * s * d
        flops = full / 2 if causal else full  # bench.go's benchFLOPs
        print(json.dumps({
            "name": case_name(b, h, hkv, l, s, d, causal),
            "shape": {"B": b, "H": h, "H_kv": hkv, "L": l, "S": s, "d": d},
            "causal": "bottom-right" if causal else "none",
            "dtype": "f32",
            "seconds": med,
            "seconds_min": min(times),
            "seconds_max": max(times),
            "reps": args.reps,
            "flops": flops,
            "gflops": flops / med / 1e9,
            "flops_done": full,
            "gflops_done": full / med / 1e9,
            "threads": threads if threads is not None else os.environ.get("OPENBLAS_NUM_THREADS"),
            "impl": "numpy " + ("batched np.matmul" if args.batched else "per-K/V-head matmul"),
            "numpy": np.__version__,
            "blas": [os.path.basename(p) for p in libs],
        }), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

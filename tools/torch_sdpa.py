#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention on a CUDA device,
with CUDA events, on the shapes of `vkattn bench --suite all`: the peer
that tools/gpu-check.sh runs beside vkattn on the H200 machine.

    python3 tools/torch_sdpa.py --out OUT/torch.json [--backends] [--quick]

Shapes (mirroring cmd/vkattn/bench.go's suiteCases; B=1, d_k = d_v = d):
  prefill  H=8, L=S in 512, 1024, 2048, 4096 at d=64 and 1024, 2048 at
           d=128, no mask and causal
  decode   H=32, H_kv=8, L=1, S in 1024, 4096, 16384, d=128 (no mask)
  long     H=1, L=S in 8192, 16384, 32768, d=64
each in float32 and float16 (--dtypes to change; Q, K, V and O all of it:
SDPA takes one dtype, so vkattn's f32-Q/f16-K/V mix has no peer here).

Causal: vkattn's bench uses the bottom-right alignment (query t sees keys
j <= t + S - L); SDPA's is_causal=True is top-left. They agree when L = S,
which every causal suite row is; a --shape with L != S gets an explicit
bottom-right boolean mask instead (which rules out the flash kernels).

Grouped-query (decode, H_kv < H): timed twice, "enable_gqa" (K/V with H_kv
heads, enable_gqa=True, torch >= 2.5) and "repeated" (K/V repeated to H
heads with repeat_interleave before timing, as older code does; the repeat
is not timed). With --backends each row is also timed under each single
SDPBackend (flash, efficient, cudnn, math) that accepts it; the default
dispatch is impl "auto". fp32 matmuls are held to full fp32
(torch.backends.cuda.matmul.allow_tf32 = False) for the math backend; the
fused kernels choose their own arithmetic.

Timing: --warmup untimed calls, then --reps calls, each between two CUDA
events (start.record(); sdpa; end.record()), synchronised after every call;
the median is reported. The same buffers are reused, as vkattn bench does:
decode K/V of 32 MiB or less can stay in the H200's L2 between calls
(--flush-l2 overwrites a 256 MiB scratch buffer before each timed call).

FLOPs: bench.go's convention, 4*B*H*L*S*d, halved for causal rows.
Bytes: Q, K, V read and O written at their element sizes (K/V at H_kv
heads even for "repeated", the least traffic the problem needs), so
tb_per_s compares with vkattn's gb_per_s/1000.

Output: a JSON array (rewritten after every shape, so a run cut short
keeps what it measured) of objects: name (bench's caseName form), suite,
shape {B,H,H_kv,L,S,d}, causal (none|bottom-right), dtype (f32|f16|bf16),
impl, ms, ms_min, ms_max, reps, flops, tflops, bytes, tb_per_s; plus,
once, under "meta" in each object: torch version, CUDA, device name.
"""

import argparse
import json
import os
import statistics
import sys
import time
import warnings


def suite_shapes(quick):
    """(suite, B, H, H_kv, L, S, d, causal) as bench.go's suiteCases lists them."""
    if quick:
        return [("prefill", 1, 2, 2, 128, 128, 64, False), ("prefill", 1, 2, 2, 128, 128, 64, True),
                ("decode", 1, 4, 2, 1, 256, 64, False)]
    cs = []
    for d, ls in ((64, (512, 1024, 2048, 4096)), (128, (1024, 2048))):
        for causal in (False, True):
            for n in ls:
                cs.append(("prefill", 1, 8, 8, n, n, d, causal))
    for s in (1024, 4096, 16384):
        cs.append(("decode", 1, 32, 8, 1, s, 128, False))
    for n in (8192, 16384, 32768):
        cs.append(("long", 1, 1, 1, n, n, 64, False))
    return cs


def case_name(b, h, hkv, l, s, d, causal):
    n = f"B={b} H={h}" + (f" H_kv={hkv}" if hkv != h else "") + f" L={l} S={s} d={d}"
    return n + (" causal bottom-right" if causal else "")


def parse_shape(text):
    vals = [int(x) for x in text.split(",") if x.strip()]
    if len(vals) != 6 or min(vals) < 1 or vals[1] % vals[2]:
        raise argparse.ArgumentTypeError(f"{text!r}: want B,H,H_kv,L,S,d with H_kv dividing H")
    return tuple(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--quick", action="store_true", help="three tiny shapes (a smoke test)")
    ap.add_argument("--shape", type=parse_shape, action="append", help="B,H,H_kv,L,S,d instead of the suites")
    ap.add_argument("--causal", action="store_true", help="bottom-right causal mask on every --shape")
    ap.add_argument("--dtypes", default="f32,f16", help="comma-separated: f32, f16, bf16 (default f32,f16)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backends", action="store_true", help="also time each single SDPA backend")
    ap.add_argument("--flush-l2", action="store_true", help="overwrite 256 MiB before each timed call")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    # A single backend refusing a shape warns why, then raises; the raise is
    # reported below, one line per refusal.
    warnings.filterwarnings("ignore", category=UserWarning)

    if not torch.cuda.is_available():
        print("torch_sdpa: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    try:
        want = [(n, dtypes[n]) for n in args.dtypes.split(",") if n]
    except KeyError as e:
        ap.error(f"--dtypes: unknown {e}")
    if args.shape:
        shapes = [("", *s, args.causal) for s in args.shape]
    else:
        shapes = suite_shapes(args.quick)

    backends = []
    if args.backends:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
                if hasattr(SDPBackend, name):
                    backends.append((name.lower(), sdpa_kernel, getattr(SDPBackend, name)))
        except ImportError:
            print("torch_sdpa: torch.nn.attention.sdpa_kernel missing; --backends ignored", file=sys.stderr)

    meta = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(dev), "allow_tf32": False,
            "flush_l2": args.flush_l2, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    scratch = torch.empty(256 << 20, dtype=torch.uint8, device=dev) if args.flush_l2 else None
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    results = []

    def save():
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, args.out)

    def time_call(fn):
        for _ in range(args.warmup):
            fn()
        torch.cuda.synchronize()
        ts = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(args.reps):
            if scratch is not None:
                scratch.zero_()
            start.record()
            fn()
            end.record()
            end.synchronize()
            ts.append(start.elapsed_time(end))
        return ts

    failed = 0
    for suite, b, h, hkv, l, s, d, causal in shapes:
        for dname, dt in want:
            q = torch.randn(b, h, l, d, device=dev, dtype=dt, generator=gen)
            k = torch.randn(b, hkv, s, d, device=dev, dtype=dt, generator=gen)
            v = torch.randn(b, hkv, s, d, device=dev, dtype=dt, generator=gen)
            kw = {}
            if causal and l == s:
                kw["is_causal"] = True
            elif causal:
                kw["attn_mask"] = torch.ones(l, s, dtype=torch.bool, device=dev).tril(s - l)
            variants = []  # (impl, k, v, extra kwargs)
            if hkv == h:
                variants.append(("auto", k, v, {}))
            else:
                variants.append(("auto enable_gqa", k, v, {"enable_gqa": True}))
                g = h // hkv
                variants.append(("auto repeated", k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), {}))
            runs = []
            for impl, kk, vv, extra in variants:
                runs.append((impl, kk, vv, extra, None))
                for bname, ctx, be in backends:
                    runs.append((impl.replace("auto", bname), kk, vv, extra, (ctx, be)))
            esize = torch.tensor([], dtype=dt).element_size()
            nbytes = esize * (b * h * l * d + 2 * b * hkv * s * d + b * h * l * d)
            full = 4.0 * b * h * l * s * d
            flops = full / 2 if causal else full  # bench.go's benchFLOPs
            for impl, kk, vv, extra, backend in runs:
                def call(kk=kk, vv=vv, extra=extra):
                    return F.scaled_dot_product_attention(q, kk, vv, **kw, **extra)
                name = case_name(b, h, hkv, l, s, d, causal)
                try:
                    if backend is None:
                        ts = time_call(call)
                    else:
                        with backend[0](backend[1]):
                            ts = time_call(call)
                except (RuntimeError, TypeError, ValueError) as e:
                    # A single backend that does not take these inputs is expected;
                    # the default dispatch failing is not.
                    msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
                    print(f"torch_sdpa: {name} {dname} {impl}: {msg}", file=sys.stderr)
                    if backend is None and "enable_gqa" not in impl:
                        failed += 1
                    torch.cuda.synchronize()
                    continue
                ms = statistics.median(ts)
                results.append({
                    "name": name, "suite": suite,
                    "shape": {"B": b, "H": h, "H_kv": hkv, "L": l, "S": s, "d": d},
                    "causal": "bottom-right" if causal else "none",
                    "dtype": dname, "impl": impl,
                    "ms": ms, "ms_min": min(ts), "ms_max": max(ts), "reps": args.reps,
                    "flops": flops, "tflops": flops / (ms * 1e-3) / 1e12,
                    "bytes": nbytes, "tb_per_s": nbytes / (ms * 1e-3) / 1e12,
                    "meta": meta,
                })
                print(f"torch_sdpa: {name} {dname} {impl}: {ms:.4g} ms, "
                      f"{results[-1]['tflops']:.3g} TFLOP/s", file=sys.stderr)
            del q, k, v, variants, runs
            save()
    save()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

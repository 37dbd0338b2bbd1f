#!/usr/bin/env python3
"""Times a PyTorch decode step on a CUDA device, the peer of `vkattn bench
--suite decode-loop` that tools/gpu-check.sh runs beside it, and joins the
two into a table.

    python3 tools/torch_decode_loop.py --out OUT/torch-decode-loop.json \
        [--vkattn OUT/decode-loop.json --table OUT/decode-loop.md] [--quick]

A step is what vkattn's DecodeStep.Run does: the token's K and V (H_kv=8
heads) and Q (H=32 heads), d=128, B=1, go from host memory into a cache
preallocated at the capacity (written at position n-1), scaled dot-product
attention of the query over the first n positions
(F.scaled_dot_product_attention, enable_gqa=True), and O back to host
memory; the step ends when O is on the host (.cpu() synchronises). Cases
mirror cmd/vkattn/benchloop.go's loopCases: n = capacity in 1024, 4096,
16384, 32768, and n = 1024 in a 32768 cache; f32 and f16 caches (Q and O
in the cache's type: SDPA takes one dtype). PyTorch has no paged cache, so
only vkattn's contiguous rows have a peer.

Timing: --warmup untimed steps, then --reps steps timed on the host
(time.perf_counter_ns around the whole step, as vkattn bench times
DecodeStep.Run); the median is reported. The cache keeps its length: each
step writes position n-1 again.

Output: a JSON array of objects: cache_length, capacity, dtype,
step_median_ns, steps_per_s, reps, meta (torch version, CUDA, device).
With --vkattn and --table, a markdown table of both side by side, with
vkattn's submissions and host waits per step.
"""

import argparse
import json
import statistics
import sys
import time

CASES = [(1024, 1024), (1024, 32768), (4096, 4096), (16384, 16384), (32768, 32768)]
H, HKV, D = 32, 8, 128


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--vkattn", help="vkattn bench --suite decode-loop --json output to join")
    ap.add_argument("--table", help="the markdown table to write (with --vkattn)")
    ap.add_argument("--quick", action="store_true", help="one short case (a smoke test)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("torch_decode_loop: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
    cases = [(256, 256)] if args.quick else CASES
    dtypes = {"f32": torch.float32, "f16": torch.float16}
    results = []
    gen = torch.Generator().manual_seed(1)
    for n, cap in cases:
        for name, dt in dtypes.items():
            k_cache = torch.randn(1, HKV, cap, D, generator=gen).to(dev, dt)
            v_cache = torch.randn(1, HKV, cap, D, generator=gen).to(dev, dt)
            k_tok = torch.randn(1, HKV, 1, D, generator=gen).to(dt).pin_memory()
            v_tok = torch.randn(1, HKV, 1, D, generator=gen).to(dt).pin_memory()
            q_tok = torch.randn(1, H, 1, D, generator=gen).to(dt).pin_memory()

            def step():
                k_cache[:, :, n - 1:n].copy_(k_tok, non_blocking=True)
                v_cache[:, :, n - 1:n].copy_(v_tok, non_blocking=True)
                q = q_tok.to(dev, non_blocking=True)
                o = F.scaled_dot_product_attention(q, k_cache[:, :, :n], v_cache[:, :, :n], enable_gqa=True)
                return o.cpu()

            for _ in range(args.warmup):
                step()
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter_ns()
                step()
                times.append(time.perf_counter_ns() - t0)
            med = statistics.median(times)
            results.append({"cache_length": n, "capacity": cap, "dtype": name, "step_median_ns": int(med),
                            "steps_per_s": 1e9 / med, "reps": args.reps, "meta": meta})
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
            del k_cache, v_cache
    if args.vkattn and args.table:
        write_table(args.vkattn, results, args.table, meta)
    return 0


def write_table(vk_path, torch_rows, out, meta):
    try:
        with open(vk_path) as f:
            vk_rows = json.load(f)
    except (OSError, ValueError) as e:
        print(f"torch_decode_loop: no table: {vk_path}: {e}", file=sys.stderr)
        return
    peer = {(r["cache_length"], r["capacity"], r["dtype"]): r for r in torch_rows}
    lines = [f"Decode steps, H=32 H_kv=8 d=128 B=1: vkattn DecodeStep.Run beside PyTorch {meta['torch']} "
             f"on {meta['device']} (host to host, median)", "",
             "| length | capacity | layout | dtype | vkattn steps/s | submits/step | waits/step | PyTorch steps/s | vkattn / PyTorch |",
             "|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in vk_rows:
        t = peer.get((r["cache_length"], r["capacity"], r["dtype"])) if r["cache"] == "contiguous" else None
        ts = f"{t['steps_per_s']:.0f}" if t else "n/a"
        ratio = f"{r['steps_per_s'] / t['steps_per_s']:.2f}" if t else "n/a"
        lines.append(f"| {r['cache_length']} | {r['capacity']} | {r['cache']} | {r['dtype']} | {r['steps_per_s']:.0f} | "
                     f"{r['submits_per_step']:g} | {r['waits_per_step']:g} | {ts} | {ratio} |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Joins `vkattn bench --json` results and tools/torch_sdpa.py's torch.json
from one tools/gpu-check.sh run into a Markdown table on stdout.

    python3 tools/gpu-table.py OUTDIR [--peak-tflops 67] [--hbm-tbps 4.3]

Reads OUTDIR/bench*.json (JSON arrays; a file that is missing, empty or
cut short is skipped with a note on stderr) and OUTDIR/torch.json if there.
Rows are joined on (B, H, H_kv, L, S, d, causal, dtype), where a vkattn
row's dtype is f32 or f16 when Q, K and V are all of it, else e.g.
"f32/kv-f16" (no torch peer: SDPA takes one dtype).

Columns:
  vkattn ms      median GPU-timestamp time (wall time where the device has
                 no timestamps: marked "w")
  torch ms       the fastest torch row for the key, its impl in brackets
                 (auto = SDPA's default dispatch; see torch_sdpa.py)
  torch/vkattn   vkattn ms / torch ms: how many times faster torch is
  TFLOP/s        bench.go's count (4*B*H*L*S*d, halved when causal) over
                 the median, for both
  % fp32 peak    vkattn TFLOP/s over --peak-tflops (fp32 FMA, non-tensor:
                 vkattn computes in fp32 whatever the storage type)
  % HBM          decode rows (L = 1) only: bytes of Q, K, V read and O
                 written (each at its element size) over the median, as a
                 share of --hbm-tbps; above 100% means K/V stayed in L2
"""

import argparse
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"gpu-table: skipping {path}: {e}", file=sys.stderr)
        return []
    if not isinstance(data, list):
        print(f"gpu-table: skipping {path}: not a JSON array", file=sys.stderr)
        return []
    return data


def vk_dtype(ts):
    q, k, v = ts
    if q == k == v:
        return q
    if k == v:
        return f"{q}/kv-{k}"
    return "/".join(ts)


def pct(x):
    return "-" if x is None else f"{100 * x:.3g}%"


def num(x):
    if x is None:
        return "-"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--peak-tflops", type=float, default=67.0, help="fp32 FMA peak (H200: ~67)")
    ap.add_argument("--hbm-tbps", type=float, default=4.3, help="HBM bandwidth, TB/s (H200: ~4.3 measured)")
    args = ap.parse_args()

    vk, torch, order = {}, {}, []
    device = None
    for path in sorted(glob.glob(os.path.join(args.outdir, "bench*.json"))):
        for r in load(path):
            try:
                d = r["dims"]
                # f16 on the cooperative matrices is a series of its own,
                # beside f16 with float32 products (--fp32-products).
                matrices = "+matrices" if "attention_coopmat" in r.get("plan", "") else ""
                key = (d["B"], d["H"], d["H_kv"], d["L"], d["S"], d["d_k"], r["causal"] != "none",
                       vk_dtype(r["dtypes"]) + matrices)
                timing = r["timing"]
                ns = (r["gpu_ns"] if timing == "gpu" else r["wall_ns"])["median"]
            except (KeyError, TypeError) as e:
                print(f"gpu-table: {path}: a row without {e}", file=sys.stderr)
                continue
            device = device or r.get("device")
            if key not in vk:
                order.append(key)
            vk[key] = {"ms": ns / 1e6, "wall": timing != "gpu", "flops": r["flops"], "bytes": r["bytes"],
                       "suite": r.get("suite") or "shape"}
    tmeta = None
    tpath = os.path.join(args.outdir, "torch.json")
    for r in load(tpath) if os.path.exists(tpath) else []:
        try:
            s = r["shape"]
            key = (s["B"], s["H"], s["H_kv"], s["L"], s["S"], s["d"], r["causal"] != "none", r["dtype"])
            ms = r["ms"]
        except (KeyError, TypeError) as e:
            print(f"gpu-table: {tpath}: a row without {e}", file=sys.stderr)
            continue
        tmeta = tmeta or r.get("meta")
        if key not in vk and key not in torch:
            order.append(key)
        best = torch.get(key)
        if best is None or ms < best["ms"]:
            torch[key] = dict(r, suite=r.get("suite") or "shape")

    suites = {"prefill": 0, "decode": 1, "long": 2}
    types = {"f32": 0, "f16": 1, "bf16": 2}

    def rank(key):
        b, h, hkv, l, s, d, causal, dt = key
        suite = (vk.get(key) or torch.get(key))["suite"]
        return (suites.get(suite, 3), l == 1, d, causal, s, l, h, hkv, types.get(dt, 3), dt)

    order.sort(key=rank)
    if not order:
        print("gpu-table: no results in", args.outdir, file=sys.stderr)
        return 1
    print(f"vkattn on {device or '?'}; torch {tmeta['torch'] + ' on ' + tmeta['device'] if tmeta else 'absent'}.")
    print(f"TFLOP/s: 4*B*H*L*S*d, halved when causal, over the median; fp32 peak {args.peak_tflops:g} TFLOP/s; "
          f"HBM {args.hbm_tbps:g} TB/s (decode rows).\n")
    print("| suite | shape | causal | dtype | vkattn ms | torch ms | torch/vkattn | vkattn TFLOP/s | "
          "torch TFLOP/s | vkattn % fp32 peak | vkattn % HBM | torch % HBM |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in order:
        b, h, hkv, l, s, d, causal, dt = key
        v, t = vk.get(key), torch.get(key)
        shape = f"B={b} H={h}" + (f" H_kv={hkv}" if hkv != h else "") + f" L={l} S={s} d={d}"
        suite = (v or t)["suite"]
        vms = v["ms"] if v else None
        vtf = v["flops"] / (vms * 1e-3) / 1e12 if v and vms else None
        tms = t["ms"] if t else None
        ttf = t["flops"] / (tms * 1e-3) / 1e12 if t and tms else None
        decode = l == 1
        vhbm = v["bytes"] / (vms * 1e-3) / 1e12 / args.hbm_tbps if decode and v and vms else None
        thbm = t["bytes"] / (tms * 1e-3) / 1e12 / args.hbm_tbps if decode and t and tms else None
        vcell = num(vms) + (" w" if v and v["wall"] else "")
        tcell = f"{num(tms)} ({t['impl']})" if t else "-"
        ratio = f"{vms / tms:.2f}x" if vms and tms else "-"
        peak = vtf / args.peak_tflops if vtf else None
        print(f"| {suite} | {shape} | {'yes' if causal else 'no'} | {dt} | {vcell} | {tcell} | {ratio} | "
              f"{num(vtf)} | {num(ttf)} | {pct(peak)} | {pct(vhbm)} | {pct(thbm)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

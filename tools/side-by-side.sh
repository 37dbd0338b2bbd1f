#!/usr/bin/env bash
# numpy + OpenBLAS against vkattn on the same shapes, in one run, and a
# Markdown table of the two rates.
#
#   go build -o /tmp/vkattn ./cmd/vkattn
#   tools/side-by-side.sh /tmp/vkattn                 # the full shapes (minutes)
#   QUICK=1 tools/side-by-side.sh /tmp/vkattn         # tiny shapes: a smoke test
#
# The shapes are tools/numpy_sdpa.py's (--list): prefill B=1 H=8 L=S=1024
# and 4096 at d=64, L=S=1024 at d=128, each without a mask and causal, and
# decode B=1 H=32 L=1 S=4096 d=128 with H_kv=32 and H_kv=8. For each shape
# it runs numpy, then `vkattn bench --shape B,H,H_kv,L,S,d [--causal]`, so a
# slow phase of the (shared, noisy) machine hits both alike. Both rates use
# bench.go's FLOP count: 4*B*H*L*S*d, halved on causal rows (numpy computes
# the whole masked matrix anyway: its causal rate is half of what it ran at).
# vkattn's is over its median GPU-timestamp time; numpy's over the median
# wall time of the call. The first vkattn call of a kernel variant compiles
# it (seconds, more when Mesa's shader cache is cold); bench reports it
# apart as "cold" and leaves it out of the median.
#
# Environment:
#   QUICK=1          the tiny shapes
#   REPS=N           timed calls per shape for both (default 5)
#   NUMPY_ENV=DIR    where tools/numpy-env.sh puts numpy (default /tmp/numpy-env)
#   OUT=DIR          keep the raw JSON there (default: a new temporary folder)
#   OPENBLAS_NUM_THREADS  numpy's BLAS threads (default 2: this machine's cores)
# The table goes to stdout (and OUT/table.md); the raw results stay in
# OUT/numpy.jsonl and OUT/vkattn-N.json. Exit status 1 if any run failed.
set -uo pipefail

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 VKATTN_BINARY   (build it: go build -o /tmp/vkattn ./cmd/vkattn)" >&2
  exit 2
fi
vkattn=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
reps=${REPS:-5}
out=${OUT:-$(mktemp -d /tmp/side-by-side.XXXXXX)}
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}

envs=$("$here/numpy-env.sh" "${NUMPY_ENV:-/tmp/numpy-env}") || { echo "side-by-side: numpy-env.sh failed" >&2; exit 1; }
eval "$envs"

quick=()
[ "${QUICK:-}" = 1 ] && quick=(--quick)
mapfile -t shapes < <("$PYTHON" "$here/numpy_sdpa.py" "${quick[@]}" --list)
[ ${#shapes[@]} -gt 0 ] || { echo "side-by-side: no shapes" >&2; exit 1; }

: > "$out/numpy.jsonl"
failed=0
i=0
for line in "${shapes[@]}"; do
  read -r shape mask <<< "$line"
  causal=()
  [ "$mask" = causal ] && causal=(--causal)
  echo "side-by-side: $shape $mask: numpy" >&2
  if ! "$PYTHON" "$here/numpy_sdpa.py" --shape "$shape" "${causal[@]}" --reps "$reps" >> "$out/numpy.jsonl"; then
    echo "side-by-side: numpy failed on $shape $mask" >&2
    failed=1
  fi
  echo "side-by-side: $shape $mask: vkattn" >&2
  if ! "$vkattn" bench --shape "$shape" "${causal[@]}" --reps "$reps" --json --quiet > "$out/vkattn-$i.json"; then
    echo "side-by-side: vkattn bench failed on $shape $mask" >&2
    failed=1
  fi
  i=$((i + 1))
done

"$PYTHON" - "$out" "$reps" <<'EOF' | tee "$out/table.md"
import glob, json, os, sys

out, reps = sys.argv[1], sys.argv[2]
key = lambda d, causal: (d["B"], d["H"], d["H_kv"], d["L"], d["S"], d["d"], causal != "none")
numpy, vk = {}, {}
for line in open(os.path.join(out, "numpy.jsonl")):
    if line.strip():
        r = json.loads(line)
        numpy[key(r["shape"], r["causal"])] = r
for path in sorted(glob.glob(os.path.join(out, "vkattn-*.json"))):
    try:
        rows = json.load(open(path))
    except ValueError:
        continue
    for r in rows:
        d = dict(r["dims"], d=r["dims"]["d_k"])
        vk[key(d, r["causal"])] = r

def f(x):
    return "-" if x is None else f"{x:.3g}"

vkdev = next((r["device"] for r in vk.values()), "?")
threads = next((r["threads"] for r in numpy.values()), "?")
print(f"numpy {next((r['numpy'] for r in numpy.values()), '?')} + OpenBLAS ({threads} threads) "
      f"vs vkattn on {vkdev}; median of {reps} calls each.")
print("GFLOP/s = 4*B*H*L*S*d, halved when causal (bench.go's count, for both), over the median time.\n")
print("| shape | causal | numpy ms | numpy GFLOP/s | vkattn ms | vkattn GFLOP/s | vkattn/numpy |")
print("|---|---|---:|---:|---:|---:|---:|")
for k in sorted(set(numpy) | set(vk), key=lambda k: (k[3] == 1, k[5], k[3], k[2], k[6])):
    n, v = numpy.get(k), vk.get(k)
    b, h, hkv, l, s, d, causal = k
    shape = f"B={b} H={h}" + (f" H_kv={hkv}" if hkv != h else "") + f" L={l} S={s} d={d}"
    nms = n["seconds"] * 1e3 if n else None
    vms = None
    if v:
        st = v["gpu_ns"] if v["timing"] == "gpu" else v["wall_ns"]
        vms = st["median"] / 1e6
    ng, vg = (n["gflops"] if n else None), (v["gflops"] if v else None)
    ratio = f"{vg / ng:.2f}x" if ng and vg else "-"
    print(f"| {shape} | {'yes' if causal else 'no'} | {f(nms)} | {f(ng)} | {f(vms)} | {f(vg)} | {ratio} |")
EOF
echo "side-by-side: raw results in $out" >&2
exit $failed

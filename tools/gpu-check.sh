#!/usr/bin/env bash
# The prepared run for a machine with a real GPU (shared/gpu.md: the H200
# one, with Python 3.12 + PyTorch + CUDA, no Go, no network): correctness
# first, then vkattn's bench suites, then PyTorch's SDPA on the same shapes,
# then a table joining the two. Every step writes its own files under
# OUTDIR; a failed step is logged and the run goes on.
#
#   tools/gpu-check.sh BINARY OUTDIR          # run in the checkout's root
#
# Steps and files (NAME.out is stdout, NAME.err stderr, unless said):
#   env        env.txt: date, uname, the binary's sha256, nvidia-smi
#   devices    devices.txt, devices.json (devices --json)
#   verify     verify.txt: the golden cases of testdata/ against the float64
#              reference, then RANDOM_CASES (default 200) random problems
#              (verify --random: odd shapes, d up to 256, GQA, decode, every
#              mask kind, lengths, f16/bf16, LSE, weights) on the device's
#              own plans, each against the reference
#   demo       demo.txt: SEMANTICS.md §18's worked examples and one seeded
#              random problem (B=2 H=4 L=S=128 d=64) against the reference
#   bench      bench.json: bench --suite all --json (prefill, decode, long)
#   bench-f16  bench-f16.json: the same with Q, K, V stored as f16 (on the
#              cooperative matrices where the device has float16 ones:
#              SEMANTICS.md §9.3; its kernel column says)
#   bench-f16-fp32  bench-f16-fp32.json: f16 again with --fp32-products (the
#              float32 products, beside the matrices' and PyTorch's fp16)
#   bench-bf16  bench-bf16.json: Q, K, V stored as bf16 (on the float16
#              matrices, each block scaled by a power of two; beside
#              PyTorch's bf16)
#   bench-kvf16  bench-kvf16.json: decode with f32 Q and f16 K/V
#   decode-loop  decode-loop.json: bench --suite decode-loop --json (decode
#              steps through a KV cache: steps/s, and per step submissions,
#              host waits, allocations and staged bytes)
#   mha-f16    mha-f16.out: a float16 self-attention layer (d=512, h=8,
#              T=1024, tools/mha_inputs.py) through `mha --explain --check`:
#              its plan (in_proj on the cooperative matrices where the
#              device has float16 ones: SEMANTICS.md §9.3), GPU time, check
#   mha-f16-fp32  mha-f16-fp32.out: the same with --fp32-products
#   torch      torch.json: tools/torch_sdpa.py, only where
#              torch.cuda.is_available() holds (else logged as skipped)
#   torch-decode-loop  torch-decode-loop.json and decode-loop.md:
#              tools/torch_decode_loop.py, PyTorch's decode step on the
#              decode-loop cases, joined with decode-loop.json
#   table      table.md: tools/gpu-table.py OUTDIR
# steps.tsv has one line per step: name, exit status, seconds. The script
# exits 1 if any step failed, after running them all.
#
# Environment:
#   QUICK=1        tiny shapes for bench and torch (a smoke test), 2 reps
#   SKIP_BENCH=1   no bench steps (and no torch: nothing to set it beside)
#   REPS=N         bench's --reps (default 10); torch_sdpa.py takes 20
#   RANDOM_CASES=N verify's random problems (default 200)
#   STEP_TIMEOUT=S seconds before a step is killed (default 300)
#   PYTHON         the Python with torch (default python3)
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 BINARY OUTDIR" >&2
  exit 2
fi
bin=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
py=${PYTHON:-python3}
reps=${REPS:-10}
limit=${STEP_TIMEOUT:-300}
mkdir -p "$out" || exit 1
# The device's own plans: a VKATTN_PLAN_AS left in the environment would
# plan every command as another vendor's quirk table says (env.txt records
# what it was).
plan_as_was=${VKATTN_PLAN_AS-<unset>}
unset VKATTN_PLAN_AS
: > "$out/steps.tsv"
failures=0

# step NAME STDOUT STDERR CMD...: runs CMD under the time limit, logs its
# exit status to steps.tsv and the terminal, and never stops the script.
step() {
  local name=$1 so=$2 se=$3 t0 rc
  shift 3
  echo "== $name: $*"
  t0=$(date +%s)
  if command -v timeout >/dev/null; then
    timeout -k 10 "$limit" "$@" > "$so" 2> "$se"
  else
    "$@" > "$so" 2> "$se"
  fi
  rc=$?
  [ "$rc" = 124 ] && echo "   ($name: killed after ${limit}s)" >&2
  [ "$rc" = 0 ] || failures=$((failures + 1))
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >> "$out/steps.tsv"
  echo "   $name: exit $rc, $(($(date +%s) - t0)) s"
  tail -n 3 "$se" | sed 's/^/   | /'
}

skip() {
  printf '%s\tskipped\t0\n' "$1" >> "$out/steps.tsv"
  echo "== $1: skipped ($2)"
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -a
  sha256sum "$bin" 2>/dev/null || true
  git -C "$repo" rev-parse HEAD 2>/dev/null || true
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  fi
  echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-} VK_ICD_FILENAMES=${VK_ICD_FILENAMES:-}"
  echo "VKATTN_PLAN_AS was $plan_as_was; unset for this run (the device's own plans)"
} > "$out/env.txt" 2>&1
echo "== env: $(head -n 1 "$out/env.txt")"

if [ ! -x "$bin" ]; then
  echo "gpu-check: $bin is not an executable" >&2
  failures=$((failures + 1))
fi

step devices "$out/devices.txt" "$out/devices.err" "$bin" devices
step devices-json "$out/devices.json" "$out/devices-json.err" "$bin" devices --json
step verify "$out/verify.txt" "$out/verify.err" "$bin" verify --dir "$repo/testdata" --random "${RANDOM_CASES:-200}"
step demo "$out/demo.txt" "$out/demo.err" "$bin" demo

if [ "${QUICK:-}" = 1 ]; then
  shapes=(--shape '1,2,2,128,128,64;1,4,2,1,256,64' --reps 2)
  reps=2
  decode=(--shape '1,4,2,1,256,64' --reps 2)
else
  shapes=(--suite all --reps "$reps")
  decode=(--suite decode --reps "$reps")
fi
if [ "${SKIP_BENCH:-}" = 1 ]; then
  skip bench SKIP_BENCH=1
  skip bench-f16 SKIP_BENCH=1
  skip bench-f16-fp32 SKIP_BENCH=1
  skip bench-bf16 SKIP_BENCH=1
  skip bench-kvf16 SKIP_BENCH=1
  skip decode-loop SKIP_BENCH=1
  skip mha-f16 SKIP_BENCH=1
  skip mha-f16-fp32 SKIP_BENCH=1
else
  step bench "$out/bench.json" "$out/bench.err" "$bin" bench "${shapes[@]}" --json --quiet
  step bench-f16 "$out/bench-f16.json" "$out/bench-f16.err" "$bin" bench "${shapes[@]}" --dtype f16 --json --quiet
  step bench-f16-fp32 "$out/bench-f16-fp32.json" "$out/bench-f16-fp32.err" "$bin" bench "${shapes[@]}" --dtype f16 --fp32-products --json --quiet
  step bench-bf16 "$out/bench-bf16.json" "$out/bench-bf16.err" "$bin" bench "${shapes[@]}" --dtype bf16 --json --quiet
  step bench-kvf16 "$out/bench-kvf16.json" "$out/bench-kvf16.err" "$bin" bench "${decode[@]}" --kv-dtype f16 --json --quiet
  step decode-loop "$out/decode-loop.json" "$out/decode-loop.err" "$bin" bench --suite decode-loop --reps "$reps" --json --quiet
  layer=(--t 1024 --d 512)
  [ "${QUICK:-}" = 1 ] && layer=(--t 128 --d 64)
  mha="$out/mha"
  step mha-inputs "$out/mha-inputs.out" "$out/mha-inputs.err" "$py" "$here/mha_inputs.py" --out "$mha" "${layer[@]}"
  mha_run=("$bin" mha -x "$mha/x.npy" --params "$mha/p.npz" --heads 8 -o "$mha/out.npy" --explain --check)
  step mha-f16 "$out/mha-f16.out" "$out/mha-f16.err" "${mha_run[@]}"
  step mha-f16-fp32 "$out/mha-f16-fp32.out" "$out/mha-f16-fp32.err" "${mha_run[@]}" --fp32-products
  rm -f "$mha/out.npy" "$mha/x.npy" "$mha/p.npz" # inputs and output are MiBs; the .out files keep the figures
fi

# torch.cuda.is_available() returns False rather than failing: exit on it.
if [ "${SKIP_BENCH:-}" = 1 ]; then
  skip torch SKIP_BENCH=1
elif "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
  quick=()
  [ "${QUICK:-}" = 1 ] && quick=(--quick --reps 2 --warmup 1)
  step torch "$out/torch.out" "$out/torch.err" "$py" "$here/torch_sdpa.py" --out "$out/torch.json" --dtypes f32,f16,bf16 --backends "${quick[@]}"
  loop=()
  [ "${QUICK:-}" = 1 ] && loop=(--quick --reps 2 --warmup 1)
  step torch-decode-loop "$out/torch-decode-loop.out" "$out/torch-decode-loop.err" "$py" "$here/torch_decode_loop.py" \
    --out "$out/torch-decode-loop.json" --vkattn "$out/decode-loop.json" --table "$out/decode-loop.md" "${loop[@]}"
else
  skip torch "no torch with CUDA under $py"
  skip torch-decode-loop "no torch with CUDA under $py"
fi

have=0
for f in "$out"/bench*.json "$out"/torch.json; do
  [ -s "$f" ] && have=1
done
if [ "$have" = 1 ] && command -v "$py" >/dev/null; then
  step table "$out/table.md" "$out/table.err" "$py" "$here/gpu-table.py" "$out"
  cat "$out/table.md"
else
  skip table "no bench or torch results"
fi

echo "== steps (name, exit status, seconds):"
cat "$out/steps.tsv"
[ "$failures" = 0 ]

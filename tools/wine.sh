#!/usr/bin/env bash
# The Windows leg of make test: cross-builds vkattn.exe and the root
# package's test binary with mingw-w64 (tools/dist.sh
# windows-go) and runs
# them under Wine on lavapipe: Wine's vulkan-1.dll forwards to the host's
# Vulkan loader and driver.
#   tools/wine.sh                   the leg; fails on any failure
#   tools/wine.sh PROG.exe ARGS...  runs one Windows program as the leg does
#                                   (make dist's dist/vkattn.exe, say)
# Needs tools/deps.sh --windows. Each run makes its own Wine prefix (some
# 10 s) and virtual X server in a temporary folder, and removes them.
set -euo pipefail
here=$PWD
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export WINEDEBUG=-all
wine=/usr/lib/wine/wine64
[ -x $wine ] || { echo "no $wine: run tools/deps.sh --windows" >&2; exit 1; }

t=$(mktemp -d)
xvfb=
cleanup() {
  [ -d "$t/prefix" ] && WINEPREFIX=$t/prefix /usr/lib/wine/wineserver -k 2>/dev/null || true
  [ -n "$xvfb" ] && kill "$xvfb" 2>/dev/null || true
  rm -rf "$t"
}
trap cleanup EXIT

# Without an X display winevulkan loads no graphics driver, and
# vkCreateInstance fails with VK_ERROR_INITIALIZATION_FAILED.
Xvfb -displayfd 3 -nolisten tcp -screen 0 320x240x24 3>"$t/display" 2>/dev/null &
xvfb=$!
for _ in $(seq 100); do [ -s "$t/display" ] && break; sleep 0.1; done
[ -s "$t/display" ] || { echo "Xvfb did not start" >&2; exit 1; }
export DISPLAY=:$(cat "$t/display")
export WINEPREFIX=$t/prefix
# The prefix is made (some 10 s) while the leg cross-builds.
$wine wineboot --init >/dev/null 2>&1 &
boot=$!

# Go's runtime (1.22 on) takes its random bytes from ProcessPrng in
# bcryptprimitives.dll, which Windows 10 has and Wine 8.0 does not (Wine 9
# does): without it every Go program stops at start. This DLL, put in the
# prefix's system32, provides it through BCryptGenRandom.
cat >"$t/prng.c" <<'EOF'
#include <windows.h>
#include <bcrypt.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T n) {
	while (n > 0) {
		ULONG k = n > 0x40000000 ? 0x40000000 : (ULONG)n;
		if (BCryptGenRandom(NULL, data, k, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0) return FALSE;
		data += k;
		n -= k;
	}
	return TRUE;
}
EOF
x86_64-w64-mingw32-gcc -O2 -shared -s -o "$t/bcryptprimitives.dll" "$t/prng.c" -lbcrypt
wine_ready() {
  wait $boot || { echo "wineboot failed" >&2; exit 1; }
  cp "$t/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
}

if [ $# -gt 0 ]; then
  wine_ready
  cd "$here"
  $wine "$@"
  exit
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
# expect NAME WANT: the output of the last step ($t/out) holds WANT.
expect() { grep -qF -- "$2" "$t/out" || { cat "$t/out"; fail "$1: the output does not say '$2'"; }; }
step() { echo "--- $*"; }

# (The CLI's own Windows paths are checked through vkattn.exe below: a
# test binary of cmd/vkattn and go vet for Windows cost some 30 s of CPU
# more and add little the cross-build does not check.)
step "cross-building vkattn.exe and the root package's test binary"
tools/dist.sh windows-go build -o "$t/vkattn.exe" ./cmd/vkattn
tools/dist.sh windows-go test -c -o "$t/vkattn.test.exe" .
wine_ready
vkattn() { $wine "$t/vkattn.exe" "$@"; }

step "vkattn.exe devices"
vkattn devices >"$t/out" 2>&1 || { cat "$t/out"; fail "devices"; }
expect devices "llvmpipe"
head -1 "$t/out"

step "vkattn.exe verify"
vkattn verify >"$t/out" 2>&1 || { cat "$t/out"; fail "verify"; }
tail -1 "$t/out"
tail -1 "$t/out" | grep -Eq '^[1-9][0-9]* passed, 0 failed$' || fail "verify does not end 'N passed, 0 failed'"

step "the worked example with --check"
ex=testdata/example
vkattn run -q $ex/q.npy -k $ex/k.npy -v $ex/v.npy --check >"$t/out" 2>&1 || { cat "$t/out"; fail "run --check"; }
expect "run" "O (1, 2): [1.60445 1.59333]"
expect "run --check" "check vs float64 reference"
grep -F "check vs float64 reference" "$t/out" | grep -q ': ok$' || { cat "$t/out"; fail "run --check is not ok"; }
grep -F -e "O (1, 2)" -e "check vs" "$t/out"

step "a KV-cache decode loop with --check, contiguous f32 and paged f16"
for cache in "" "--page 2 --kv-dtype f16"; do
  # shellcheck disable=SC2086 # the cache flags are words
  vkattn decode -q $ex/k.npy -k $ex/k.npy -v $ex/v.npy $cache --check >"$t/out" 2>&1 || { cat "$t/out"; fail "decode $cache --check"; }
  grep -F "check vs float64 reference" "$t/out" | grep -q ': ok$' || { cat "$t/out"; fail "decode $cache --check is not ok"; }
  grep -F "cache " "$t/out" | head -1
done

# Outputs: written as a temporary file beside the target and renamed over
# it (the old file kept as a hard link until then); a relative path with
# / whose folder does not exist is refused before any work.
step "outputs: -o into a missing folder, a new file, over an existing file"
mkdir "$t/o"
inputs=(-q "$root/$ex/q.npy" -k "$root/$ex/k.npy" -v "$root/$ex/v.npy")
if (cd "$t/o" && vkattn run "${inputs[@]}" -o nosuch/O.npy) >"$t/out" 2>&1; then
  fail "run -o nosuch/O.npy succeeded"
fi
expect "-o nosuch/O.npy" "directory nosuch does not exist"
cat "$t/out"
mkdir "$t/o/sub"
(cd "$t/o" && vkattn run "${inputs[@]}" -o sub/O.npy) >"$t/out" 2>&1 || { cat "$t/out"; fail "run -o sub/O.npy"; }
cp "$t/o/sub/O.npy" "$t/first.npy"
(cd "$t/o" && vkattn run "${inputs[@]}" --mask "$root/$ex/mask.npy" -o sub/O.npy) >"$t/out" 2>&1 ||
  { cat "$t/out"; fail "run -o over an existing file"; }
cmp -s "$t/first.npy" "$t/o/sub/O.npy" && fail "run --mask -o sub/O.npy left the old output in place"
[ "$(ls -A "$t/o/sub")" = O.npy ] || fail "the output folder holds $(ls -A "$t/o/sub" | tr '\n' ' '); want only O.npy"
[ "$(ls -A "$t/o")" = sub ] || fail "the working folder holds $(ls -A "$t/o" | tr '\n' ' '); want only sub"

# Wine turns a SIGINT into the console's Ctrl-C, which Go delivers as
# os.Interrupt: bench stops at the next submission and exits 130.
step "a Ctrl-C stops bench"
$wine "$t/vkattn.exe" bench --shape 1,8,8,1024,1024,64 --reps 1000 >"$t/out" 2>"$t/err" &
bench=$!
for _ in $(seq 600); do grep -q '(1/' "$t/err" && break; sleep 0.1; done
kill -INT $bench
s=0
wait $bench || s=$?
tr '\r' '\n' <"$t/err" | grep -F interrupt || true
[ $s = 130 ] || { cat "$t/err"; fail "bench after Ctrl-C exited $s, want 130"; }

# The validation layer cannot load under Wine (its Vulkan passes no
# layers through): VKATTN_TEST_VALIDATION=0.
suite() {
  local bin=${2:-vkattn.test.exe}
  step "$bin -test.run '$1'"
  VKATTN_TEST_VALIDATION=0 $wine "$t/$bin" -test.count=1 -test.v -test.timeout 5m -test.run "$1" >"$t/out" 2>&1 ||
    { grep -v -e '^=== ' -e '--- PASS' "$t/out"; fail "tests $1"; }
  n=$(grep -c -e '--- PASS' "$t/out" || true)
  [ "$n" -gt 0 ] || { cat "$t/out"; fail "no test ran for $1"; }
  grep -e '^--- ' "$t/out"
  echo "$n passed (with subtests)"
}
# The golden cases on lavapipe's own plan and NVIDIA's (row and tiled
# kernels), a backward case. (The KV cache's decode loop runs above,
# through vkattn.exe decode.)
suite '^TestGoldenCases$/^(auto|nvidia)$'
suite '^TestAttentionBackwardEveryPlan$/^auto$/^GQA'
echo "--- CPU time, user and system: this script, then the programs it ran"
times

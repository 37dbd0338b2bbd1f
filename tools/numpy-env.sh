#!/usr/bin/env bash
# Puts Debian's numpy with the pthread OpenBLAS into DIR without installing
# anything (apt-get download + dpkg -x), checks that it imports under
# Debian's /usr/bin/python3 with OpenBLAS loaded, and prints on stdout the
# exports that use it (messages go to stderr):
#
#   eval "$(tools/numpy-env.sh /tmp/numpy-env)"
#   "$PYTHON" tools/numpy_sdpa.py
#
# Why each part:
#   * Debian's numpy links libblas.so.3 / liblapack.so.3, which resolve to
#     the slow reference BLAS unless OpenBLAS's copies come first on
#     LD_LIBRARY_PATH (the openblas-pthread directory below).
#   * numpy's extension modules are built for Debian's Python (cpython-311
#     on bookworm); the pyenv python3 first on PATH may be another version,
#     so the script checks /usr/bin/python3's EXT_SUFFIX against the files.
#   * numpy.show_config() reports the build-time BLAS ("blas", "lapack":
#     the generic Debian alternatives), never "openblas", so the check reads
#     /proc/self/maps after the import instead and times one sgemm.
# Running it again with DIR already filled only re-checks and re-prints.
set -euo pipefail

if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: $0 DIR   (then: eval \"\$($0 DIR)\")" >&2
  exit 2
fi
mkdir -p "$1"
dir=$(cd "$1" && pwd)
root=$dir/root
py=${PYTHON:-/usr/bin/python3}
packages=(python3-numpy libopenblas0-pthread libgfortran5)
libdir=$root/usr/lib/x86_64-linux-gnu
blasdir=$libdir/openblas-pthread
pypath=$root/usr/lib/python3/dist-packages

if [ ! -e "$dir/.extracted" ]; then
  mkdir -p "$dir/debs" "$root"
  rm -f "$dir/debs"/*.deb
  # The download runs as root into a folder apt's sandbox user cannot
  # write: say so rather than warn.
  get() { (cd "$dir/debs" && apt-get -q -o APT::Sandbox::User=root "$@" download "${packages[@]}") >&2; }
  if ! get; then
    # No (or stale) package lists: fetch them into a private folder, as
    # shared/gpu.md does, so the system's lists and lock are left alone.
    lists=$dir/lists
    mkdir -p "$lists/partial"
    o=(-o "Dir::State::Lists=$lists" -o APT::Architecture=amd64 -o APT::Architectures=amd64)
    echo "numpy-env: apt-get download failed; updating package lists into $lists" >&2
    apt-get -q "${o[@]}" update >&2
    get "${o[@]}"
  fi
  for f in "$dir/debs"/*.deb; do
    dpkg -x "$f" "$root"
  done
  touch "$dir/.extracted"
fi

# Python ABI: the numpy package's extension suffix must be the interpreter's.
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if [ ! -e "$pypath/numpy/core/_multiarray_umath$suffix" ]; then
  have=$(ls "$pypath"/numpy/core/_multiarray_umath.* 2>/dev/null | sed 's/.*_multiarray_umath//' | tr '\n' ' ')
  echo "numpy-env: $py ($("$py" -V 2>&1)) wants extension suffix $suffix; the numpy package has: ${have:-none}" >&2
  echo "numpy-env: use Debian's own python3 (PYTHON=/usr/bin/python3)" >&2
  exit 1
fi
for f in "$blasdir/libblas.so.3" "$blasdir/liblapack.so.3" "$libdir/libgfortran.so.5"; do
  [ -e "$f" ] || { echo "numpy-env: $f missing after extraction (remove $dir/.extracted to redo)" >&2; exit 1; }
done

export PYTHONPATH=$pypath${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=$blasdir:$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}

# numpy imports from DIR, and the BLAS it loaded is OpenBLAS.
"$py" - "$pypath" >&2 <<'EOF'
import sys, time
import numpy as np
if not np.__file__.startswith(sys.argv[1]):
    sys.exit(f"numpy-env: numpy came from {np.__file__}, not {sys.argv[1]}")
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l and ("blas" in l or "lapack" in l)})
if not any("libopenblas" in l for l in libs):
    sys.exit(f"numpy-env: OpenBLAS not loaded; BLAS libraries mapped: {libs}")
a = np.ones((1024, 1024), np.float32)
a @ a
t = time.perf_counter(); a @ a; t = time.perf_counter() - t
print(f"numpy-env: numpy {np.__version__} from {np.__file__}")
print(f"numpy-env: BLAS loaded: {', '.join(libs)}")
print(f"numpy-env: sgemm 1024^3: {2 * 1024**3 / t / 1e9:.1f} GFLOP/s")
EOF

printf 'export PYTHON=%q\n' "$py"
printf 'export PYTHONPATH=%q\n' "$PYTHONPATH"
printf 'export LD_LIBRARY_PATH=%q\n' "$LD_LIBRARY_PATH"
printf 'export OPENBLAS_NUM_THREADS=%q\n' "$OPENBLAS_NUM_THREADS"

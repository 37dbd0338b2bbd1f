#!/usr/bin/env bash
# Builds every SPIR-V variant listed in shaders/manifest.txt, and each
# example's kernels: examples/*/shaders/NAME.comp into NAME.spv beside it.
#   tools/glslc.sh          rebuild shaders/*.spv and the examples' .spv (and
#                           name the compiler in shaders/glslc-version.txt)
#   tools/glslc.sh --check  fail if a committed .spv differs from a fresh build
set -euo pipefail
check=0
[ "${1:-}" = "--check" ] && check=1
# Every shader is compiled by one pinned glslc, Debian 13's (it compiles
# GL_KHR_cooperative_matrix; Debian 12's cannot), which tools/trixie.sh
# unpacks into a cache folder; VKATTN_GLSLC names another compiler.
glslc=${VKATTN_GLSLC:-$("$(dirname "$0")/trixie.sh" glslc)}
cd "$(dirname "$0")/../shaders"
# The compiler the committed SPIR-V came from (glslc --version, first
# three lines), kept beside it: another version may emit other bytes for
# the same source, and --check says so rather than only "stale".
version=$("$glslc" --version | sed -n 1,3p) # reads it all: head would leave glslc a SIGPIPE under pipefail
if [ $check = 1 ] && [ "$version" != "$(cat glslc-version.txt 2>/dev/null)" ]; then
  echo "note: the committed SPIR-V came from" >&2
  sed 's/^/    /' glslc-version.txt >&2 2>/dev/null || echo "    (no shaders/glslc-version.txt)" >&2
  echo "  and this glslc ($glslc) is" >&2
  echo "$version" | sed 's/^/    /' >&2
  echo "  so its output may differ from the committed bytes for that reason alone." >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The manifest's variants: name, source, flags.
variants=()
while read -r name src flags; do
  case "$name" in ''|\#*) continue ;; esac
  variants+=("$name $src $flags")
done < manifest.txt
# The examples' kernels, one variant per source and no defines; their
# names are paths from shaders/, so each .spv lands beside its source.
for src in ../examples/*/shaders/*.comp; do
  if [ -e "$src" ]; then variants+=("${src%.comp} $src"); fi
done
# shown names a variant's .spv from the repository's root, for messages.
shown() { case $1 in ../*) echo "${1#../}.spv" ;; *) echo "shaders/$1.spv" ;; esac; }
# Every variant compiles first, as many at once as there are cores; a
# failed compile fails the script when its job is collected.
jobs=$(nproc 2>/dev/null || echo 1)
running=0
failed=0
reap() { wait -n || failed=1; running=$((running - 1)); }
# Each build goes to $tmp/<its index>.spv (names may hold slashes).
for i in "${!variants[@]}"; do
  read -r name src flags <<<"${variants[$i]}"
  [ "$running" -ge "$jobs" ] && reap
  # shellcheck disable=SC2086
  "$glslc" -fshader-stage=compute --target-env=vulkan1.1 -O $flags "$src" -o "$tmp/$i.spv" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do reap; done
[ $failed = 0 ] || { echo "glslc failed (above)" >&2; exit 1; }
stale=0
for i in "${!variants[@]}"; do
  read -r name src flags <<<"${variants[$i]}"
  if [ $check = 1 ]; then
    if ! cmp -s "$tmp/$i.spv" "$name.spv"; then
      echo "stale SPIR-V: $(shown "$name") does not match ${src#../} ($flags); run tools/glslc.sh" >&2
      stale=1
    fi
  else
    cp "$tmp/$i.spv" "$name.spv"
    echo "built $(shown "$name")"
  fi
done
if [ $check = 1 ]; then
  [ $stale = 0 ] && echo "SPIR-V is fresh"
  exit $stale
fi
echo "$version" > glslc-version.txt

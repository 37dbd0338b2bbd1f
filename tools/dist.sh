#!/usr/bin/env bash
# Builds the binaries a user without Go can download, into dist/:
#   dist/vkattn       linux/amd64, with the viewer window (-tags viewer)
#   dist/vkattn.exe   windows/amd64, cross-built with mingw-w64, without the
#                     viewer (GLFW's Windows build is not set up here)
# Both load the Vulkan loader at run time (libvulkan.so.1, vulkan-1.dll):
# nothing of Vulkan is linked in.
#   tools/dist.sh windows-go ARGS...   runs `go ARGS` with the same Windows
#                                      cross-build settings (tools/wine.sh
#                                      builds its test binaries so)
# Needs tools/deps.sh --viewer --windows (make dist installs them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}

# mingw-w64 ships no Vulkan headers, and vkattn's C code includes
# <vulkan/vulkan.h>. The system's (libvulkan-dev) are copied into a folder
# of their own and searched with -idirafter: after every other include
# folder, so vulkan-go keeps compiling against its own 1.1.88 copy (with
# -I it would take the system's and fail on their NVX types), and nothing
# else of /usr/include reaches the Windows build. The folder's path is
# fixed, so the Go build cache keeps the cross-built vulkan-go (some 75 s
# of CPU) between runs.
windows_env() {
  local inc=$root/build/mingw-include src
  for src in vulkan vk_video; do
    [ -d "/usr/include/$src" ] || { echo "no /usr/include/$src: run tools/deps.sh (libvulkan-dev)" >&2; exit 1; }
    # Copied again when the system's are newer (libvulkan-dev upgraded).
    if [ ! -e "$inc/$src.copied" ] || [ -n "$(find "/usr/include/$src" -newer "$inc/$src.copied" -print -quit)" ]; then
      mkdir -p "$inc"
      rm -rf "$inc/$src"
      cp -a "/usr/include/$src" "$inc/$src"
      touch "$inc/$src.copied"
    fi
  done
  command -v x86_64-w64-mingw32-gcc >/dev/null || { echo "no x86_64-w64-mingw32-gcc: run tools/deps.sh --windows" >&2; exit 1; }
  export GOOS=windows GOARCH=amd64 CGO_ENABLED=1 CC=x86_64-w64-mingw32-gcc
  export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -idirafter $inc"
}

if [ "${1:-}" = windows-go ]; then
  shift
  windows_env
  exec $GO "$@"
fi
[ $# -eq 0 ] || { echo "usage: $0 [windows-go ARGS...]" >&2; exit 2; }

mkdir -p dist
# -s -w: no symbol table or DWARF (Go's own tables for stack traces stay).
$GO build -tags viewer -ldflags='-s -w' -o dist/vkattn ./cmd/vkattn
(windows_env && $GO build -ldflags='-s -w' -o dist/vkattn.exe ./cmd/vkattn)
ls -l dist/vkattn dist/vkattn.exe

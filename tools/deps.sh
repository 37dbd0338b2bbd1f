#!/usr/bin/env bash
# Ensures the system packages vkattn needs are installed: installs the
# missing ones with apt when running as root, otherwise names them and fails.
#   tools/deps.sh           what the library and the CLI need (Vulkan), and the
#                           pinned glslc the shaders are built with (Debian
#                           13's, unpacked into a cache folder by
#                           tools/trixie.sh; nothing of the system changes)
#   tools/deps.sh --viewer  also what the viewer window needs to build (the
#                           X11 and GL headers GLFW compiles against) and
#                           its tests (a virtual X server, xdotool, import)
set -euo pipefail
packages=(mesa-vulkan-drivers libvulkan1 libvulkan-dev spirv-tools vulkan-validationlayers)
if [ "${1:-}" = "--viewer" ]; then
  packages+=(libx11-dev libxcursor-dev libxrandr-dev libxinerama-dev libxi-dev libxxf86vm-dev libgl-dev
    xvfb xdotool imagemagick)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
glslc() { "$(dirname "$0")/trixie.sh" glslc >/dev/null; }
[ ${#missing[@]} -eq 0 ] && { glslc; exit 0; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "missing system packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
glslc

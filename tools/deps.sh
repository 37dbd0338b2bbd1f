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
#   tools/deps.sh --windows also what the Windows build and its tests under
#                           Wine need (tools/dist.sh, tools/wine.sh): the
#                           mingw-w64 cross-compiler, Wine without its
#                           recommended extras, a virtual X server
# The options combine.
set -euo pipefail
packages=(mesa-vulkan-drivers libvulkan1 libvulkan-dev spirv-tools vulkan-validationlayers)
# Installed with --no-install-recommends: Wine recommends some hundred
# packages (fonts, 32-bit libraries, sound) that nothing here uses.
lean=()
for opt in "$@"; do
  case $opt in
  --viewer)
    packages+=(libx11-dev libxcursor-dev libxrandr-dev libxinerama-dev libxi-dev libxxf86vm-dev libgl-dev
      xvfb xdotool imagemagick) ;;
  --windows)
    packages+=(xvfb)
    lean+=(wine64 libwine gcc-mingw-w64-x86-64-posix) ;;
  *) echo "usage: $0 [--viewer] [--windows]" >&2; exit 2 ;;
  esac
done
absent() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(absent "${packages[@]}")
mapfile -t missing_lean < <(absent ${lean[@]+"${lean[@]}"})
glslc() { "$(dirname "$0")/trixie.sh" glslc >/dev/null; }
[ ${#missing[@]} -eq 0 ] && [ ${#missing_lean[@]} -eq 0 ] && { glslc; exit 0; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${missing[*]} ${missing_lean[*]}" >&2
  apt-get update -qq
  export DEBIAN_FRONTEND=noninteractive
  [ ${#missing[@]} -eq 0 ] || apt-get install -y -qq "${missing[@]}" >/dev/null
  [ ${#missing_lean[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${missing_lean[@]}" >/dev/null
else
  echo "missing system packages: ${missing[*]} ${missing_lean[*]}" >&2
  [ ${#missing[@]} -eq 0 ] || echo "install them with: sudo apt-get install ${missing[*]}" >&2
  [ ${#missing_lean[@]} -eq 0 ] || echo "${missing[*]:+and }sudo apt-get install --no-install-recommends ${missing_lean[*]}" >&2
  exit 1
fi
glslc

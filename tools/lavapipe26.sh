#!/usr/bin/env bash
# Runs a program on Mesa 26's lavapipe (tools/trixie.sh lavapipe), the
# Vulkan CPU driver with VK_KHR_cooperative_matrix, instead of the
# system's Mesa 22: through trixie's dynamic loader and C library (the
# system's Vulkan loader found after trixie's libraries), with
# VK_ICD_FILENAMES naming only that driver and VK_LAYER_PATH trixie's
# validation layer (Debian 12's does not know cooperative matrices).
#   tools/lavapipe26.sh ./vkattn devices
#   go test -c -o /tmp/vkattn.test . && tools/lavapipe26.sh /tmp/vkattn.test -test.run Coop
# The program must be a dynamically linked executable (a go test binary,
# a go build); a shell script or `go run` would start trixie's loader on
# the wrong file.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: tools/lavapipe26.sh PROGRAM [ARGS...]" >&2; exit 2; }
dir=$("$(dirname "$0")/trixie.sh" lavapipe)
lib=$dir/usr/lib/x86_64-linux-gnu
prog=$(command -v "$1")
shift
export VK_ICD_FILENAMES=$dir/lvp_icd.json
export VK_LAYER_PATH=$dir/usr/share/vulkan/explicit_layer.d
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:/usr/lib/x86_64-linux-gnu" "$prog" "$@"

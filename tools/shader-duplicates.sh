#!/usr/bin/env bash
# Lists the places where the shaders repeat themselves: runs of six or more
# lines that two places share, the same lines or lines of the same shape
# (other names and numbers), as the `duplicates` command finds them.
#
#   tools/shader-duplicates.sh [--most N]   (make shader-duplicates)
#
# `duplicates` reads source files by their ending and knows none for
# compute shaders, so the script copies shaders/*.comp and shaders/*.glsl
# into a temporary folder as NAME.comp.glsl and NAME.glsl.glsl (GLSL it
# reads) and runs it there; the rows name the copies, so attention.comp.glsl:10
# is line 10 of shaders/attention.comp. A row marked "boilerplate" shares
# mostly punctuation and keywords.
#
# `duplicates` is a developer's command, not a dependency of the project:
# where it is not installed the script says so and exits 0, so `make test`
# and CI (which lack it) do not run this check.
set -euo pipefail
most=40
if [ "${1:-}" = "--most" ] && [ -n "${2:-}" ]; then
  most=$2
fi
if ! command -v duplicates >/dev/null 2>&1; then
  echo "shader-duplicates: the duplicates command is not installed here; no shader duplicates were listed" >&2
  exit 0
fi
shaders="$(cd "$(dirname "$0")/../shaders" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$shaders"/*.comp "$shaders"/*.glsl; do
  cp "$f" "$tmp/$(basename "$f").glsl"
done
# Outside a git checkout duplicates reads every file of the folder.
duplicates --repo "$tmp" --most "$most"

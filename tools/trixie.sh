#!/usr/bin/env bash
# Unpacks programs of Debian 13 (trixie) into a cache folder, without
# installing anything or touching the system's apt configuration: the
# packages are resolved and downloaded through a private apt state, then
# extracted with dpkg -x. They run through trixie's own dynamic loader and
# C library, since they need a newer glibc than Debian 12's.
#   tools/trixie.sh glslc     the pinned glslc; prints the path of a wrapper
#                             that runs it (tools/glslc.sh uses it)
#   tools/trixie.sh lavapipe  Mesa's lavapipe from trixie-backports, which
#                             has VK_KHR_cooperative_matrix, and trixie's
#                             validation layer, which knows it; prints their
#                             folder (tools/lavapipe26.sh runs programs on it)
#   tools/trixie.sh mirror    prints the Debian mirror it would use
# The folder is $VKATTN_TOOLS, else $XDG_CACHE_HOME/vkattn-tools, else
# ~/.cache/vkattn-tools; a folder already holding the pinned version is
# used as it is.
# The Debian mirror is $VKATTN_DEBIAN_MIRROR, else the first one the
# machine's own apt sources name for a Debian release (one-line .list and
# deb822 .sources files); the script says which, and without either it
# says to set VKATTN_DEBIAN_MIRROR (a folder already holding the pinned
# version needs no mirror).
set -euo pipefail

# The pinned versions: the committed SPIR-V comes from this glslc.
GLSLC_VERSION=2025.2-1
MESA_VERSION=26.1.6-1~bpo13+1

# apt_mirror prints the first http(s) URI that the apt sources give for a
# Debian release's main archive (a codename or stable/testing/unstable,
# with -updates or -backports; not -security, whose archive has no
# trixie-backports, nor another distribution's), tab, the file naming it.
apt_mirror() {
  local list=/etc/apt/sources.list parts=/etc/apt/sources.list.d/
  if command -v apt-config >/dev/null; then
    eval "$(apt-config shell list Dir::Etc::SourceList/f parts Dir::Etc::SourceParts/d)"
  fi
  local files=()
  [ -f "$list" ] && files+=("$list")
  for f in "$parts"*.list "$parts"*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk '
    function debian(suite) {
      return suite ~ /^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)(-updates|-backports)?$/
    }
    function consider(type, uri, suite) {
      if (found == "" && type == "deb" && uri ~ /^https?:\/\// && debian(suite)) {
        sub(/\/+$/, "", uri)
        found = uri "\t" FILENAME
      }
    }
    # One stanza of a deb822 file: every type, URI and suite it lists.
    function stanza(   nt, nu, ns, t, u, x, ty, ur, su) {
      if (enabled != "no") {
        nt = split(types, ty, " "); nu = split(uris, ur, " "); ns = split(suites, su, " ")
        for (t = 1; t <= nt; t++) for (u = 1; u <= nu; u++) for (x = 1; x <= ns; x++) consider(ty[t], ur[u], su[x])
      }
      types = uris = suites = field = enabled = ""
    }
    FNR == 1 { if (deb822) stanza(); deb822 = FILENAME ~ /\.sources$/ }
    /^[ \t]*#/ { next }
    !deb822 {
      line = $0
      gsub(/\[[^]]*\]/, "", line)
      n = split(line, w, " ")
      if (n >= 3) consider(w[1], w[2], w[3])
      next
    }
    /^[ \t]*$/ { stanza(); next }
    /^[ \t]/ { value = $0 }
    /^[^ \t]/ { field = tolower($0); sub(/:.*/, "", field); value = $0; sub(/^[^:]*:/, "", value) }
    field == "types" { types = types " " value }
    field == "uris" { uris = uris " " value }
    field == "suites" { suites = suites " " value }
    field == "enabled" { gsub(/[ \t]/, "", value); enabled = tolower(value) }
    END { if (deb822) stanza(); if (found != "") print found }
  ' "${files[@]}"
}

if [ -n "${VKATTN_DEBIAN_MIRROR:-}" ]; then
  MIRROR=$VKATTN_DEBIAN_MIRROR
  MIRROR_FROM="VKATTN_DEBIAN_MIRROR"
elif found=$(apt_mirror) && [ -n "$found" ]; then
  MIRROR=${found%%$'\t'*}
  MIRROR_FROM="the apt sources, ${found#*$'\t'}"
else
  MIRROR=
  MIRROR_FROM="no Debian mirror in the apt sources and no VKATTN_DEBIAN_MIRROR: set it to a Debian mirror's URL (the one an apt source names)"
fi

# need_mirror stops where a download needs the mirror and none is known.
need_mirror() {
  if [ -z "$MIRROR" ]; then
    echo "trixie.sh: $MIRROR_FROM" >&2
    exit 1
  fi
}

root=${VKATTN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/vkattn-tools}
lib=usr/lib/x86_64-linux-gnu

# fetch DIR PACKAGE=VERSION... downloads the packages (trixie and
# trixie-backports) and unpacks them into DIR.
fetch() {
  need_mirror
  local dir=$1
  shift
  local apt="$root/apt"
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc/preferences.d" "$dir.debs"
  cat >"$apt/etc/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie-backports main
EOF
  local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=-"
    -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d" -o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists"
    -o "Dir::State::status=/dev/null" -o "Dir::Cache=$apt" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
  echo "trixie.sh: Debian mirror $MIRROR ($MIRROR_FROM)" >&2
  # The lists are read again daily, and when the mirror changes (apt keys
  # them by its URI: the old mirror's do not serve the new one).
  if [ ! -e "$apt/lists/.fresh" ] || [ -n "$(find "$apt/lists/.fresh" -mmin +1440)" ] ||
    [ "$(cat "$apt/lists/.fresh")" != "$MIRROR" ]; then
    echo "trixie.sh: reading the trixie package lists" >&2
    apt-get "${opts[@]}" -qq update
    echo "$MIRROR" >"$apt/lists/.fresh"
  fi
  (cd "$dir.debs" && apt-get "${opts[@]}" -qq download "$@")
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  for deb in "$dir.debs"/*.deb; do
    dpkg -x "$deb" "$dir.tmp"
  done
  rm -rf "$dir" "$dir.debs"
  mv "$dir.tmp" "$dir"
}

case "${1:-}" in
glslc)
  dir="$root/glslc-$GLSLC_VERSION"
  if [ ! -x "$dir/glslc" ]; then
    echo "trixie.sh: fetching glslc $GLSLC_VERSION" >&2
    fetch "$dir" "glslc=$GLSLC_VERSION" "libshaderc1=$GLSLC_VERSION" libc6/trixie libstdc++6/trixie libgcc-s1/trixie
    cat >"$dir/glslc" <<EOF
#!/bin/sh
exec "$dir/$lib/ld-linux-x86-64.so.2" --library-path "$dir/$lib" "$dir/usr/bin/glslc" "\$@"
EOF
    chmod +x "$dir/glslc"
  fi
  echo "$dir/glslc"
  ;;
lavapipe)
  dir="$root/lavapipe-$MESA_VERSION"
  if [ ! -e "$dir/lvp_icd.json" ]; then
    echo "trixie.sh: fetching Mesa $MESA_VERSION's lavapipe" >&2
    fetch "$dir" "mesa-vulkan-drivers=$MESA_VERSION" libllvm19/trixie libc6/trixie libstdc++6/trixie libgcc-s1/trixie \
      libelf1t64/trixie libzstd1/trixie libdrm2/trixie libdrm-amdgpu1/trixie libdisplay-info2/trixie \
      libwayland-client0/trixie libexpat1/trixie libpng16-16t64/trixie zlib1g/trixie libedit2/trixie libffi8/trixie \
      libxml2/trixie libz3-4/trixie libbsd0/trixie libmd0/trixie libicu76/trixie liblzma5/trixie libtinfo6/trixie \
      libx11-xcb1/trixie libxcb1/trixie libxau6/trixie libxdmcp6/trixie libxcb-dri3-0/trixie libxcb-present0/trixie \
      libxcb-randr0/trixie libxcb-shm0/trixie libxcb-sync1/trixie libxcb-xfixes0/trixie libxshmfence1/trixie \
      vulkan-validationlayers/trixie
    sed "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$dir/$lib/libvulkan_lvp.so\"#" \
      "$dir/usr/share/vulkan/icd.d/lvp_icd.json" >"$dir/lvp_icd.json.tmp"
    mv "$dir/lvp_icd.json.tmp" "$dir/lvp_icd.json"
  fi
  echo "$dir"
  ;;
mirror)
  need_mirror
  echo "trixie.sh: Debian mirror $MIRROR ($MIRROR_FROM)" >&2
  echo "$MIRROR"
  ;;
*)
  echo "usage: tools/trixie.sh glslc|lavapipe|mirror" >&2
  exit 2
  ;;
esac

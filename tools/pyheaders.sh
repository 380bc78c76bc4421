#!/bin/bash
# The C headers of CPython VER for ARCH Linux, as Debian builds it, for cross-compiling goloop's
# engine (pyconfig.h differs per architecture): Debian's libpython3.X-dev for that architecture,
# fetched with apt-get download (a private apt state: the machine's own apt setup, architectures
# and status are left alone) and unpacked with dpkg -x. Needs apt and dpkg (a Debian or Ubuntu
# machine) and Debian's archive keyring.
#   tools/pyheaders.sh aarch64 3.13   -> prints two include folders, one a line:
#     .../usr/include/python3.13        (Python.h and the rest; its pyconfig.h picks the arch's)
#     .../arch                          (only aarch64-linux-gnu/python3.13/pyconfig.h: adding the
#                                        whole /usr/include would put Debian's libc headers over
#                                        the cross compiler's own)
# 3.11 comes from bookworm, 3.13 from trixie or sid, 3.14 and 3.15 from sid (the newest of the
# suites that has it). Debian ships no 3.12 any more and no free-threaded (3.13t) build: for
# those tools/wheels.py derives the aarch64 pyconfig.h from an x86-64 interpreter's.
# The result is cached in $GOLOOP_CACHE (default ~/.cache/goloop)/pyheaders/ARCH/VER.
set -euo pipefail
arch=${1:?usage: pyheaders.sh x86_64|aarch64 3.X}; ver=${2:?usage: pyheaders.sh ARCH 3.X}
case $arch in
  x86_64) deb_arch=amd64 ;;
  aarch64) deb_arch=arm64 ;;
  *) echo "pyheaders.sh: unknown architecture $arch" >&2; exit 2 ;;
esac
[[ $ver =~ ^3\.[0-9]+$ ]] || { echo "pyheaders.sh: want a version like 3.13, not $ver" >&2; exit 2; }
cache=${GOLOOP_CACHE:-${HOME:-/root}/.cache/goloop}/pyheaders
out=$cache/$arch/$ver
inc=$out/usr/include/python$ver
if [ ! -f "$inc/Python.h" ] || [ ! -f "$out/arch/$arch-linux-gnu/python$ver/pyconfig.h" ]; then
  apt=$cache/apt-$deb_arch
  mkdir -p "$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/empty" "$apt/debs"
  : >"$apt/status"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || { echo "pyheaders.sh: $keyring missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
  # the Debian mirror the host's apt uses (its sources, deb822 or one-line style)
  mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p; s/^deb  *\(\[[^]]*\] *\)\?\([^ ]*\/debian\)\/* .*/\2/p' \
    /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)}
  [ -n "$mirror" ] || { echo "pyheaders.sh: no Debian mirror found in /etc/apt (set DEBIAN_MIRROR)" >&2; exit 1; }
  : >"$apt/sources.list"
  for suite in bookworm trixie sid; do
    echo "deb [arch=$deb_arch signed-by=$keyring] $mirror $suite main" >>"$apt/sources.list"
  done
  opts=(-o "Dir::State=$apt/state" -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt/cache"
        -o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/empty"
        -o "Dir::Etc::Preferences=$apt/empty/none" -o "Dir::Etc::PreferencesParts=$apt/empty"
        -o "APT::Architecture=$deb_arch" -o "APT::Architectures=$deb_arch" -o Acquire::Languages=none
        -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false)
  # one index update a day is plenty (the headers of a minor version do not change its ABI)
  if [ -z "$(find "$apt/state/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
    apt-get "${opts[@]}" update -qq >"$apt/update.log" 2>&1 || { tail -20 "$apt/update.log" >&2; exit 1; }
  fi
  rm -f "$apt/debs/"*.deb
  (cd "$apt/debs" && apt-get "${opts[@]}" download -qq "libpython$ver-dev:$deb_arch") >"$apt/download.log" 2>&1 ||
    { echo "pyheaders.sh: Debian has no libpython$ver-dev for $deb_arch:" >&2; tail -5 "$apt/download.log" >&2; exit 1; }
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  dpkg -x "$apt/debs/"libpython"$ver"-dev_*.deb "$out.tmp/x"
  mkdir -p "$out.tmp/usr/include" "$out.tmp/arch/$arch-linux-gnu"
  mv "$out.tmp/x/usr/include/python$ver" "$out.tmp/usr/include/"
  mv "$out.tmp/x/usr/include/$arch-linux-gnu/python$ver" "$out.tmp/arch/$arch-linux-gnu/"
  basename "$apt/debs/"libpython"$ver"-dev_*.deb >"$out.tmp/SOURCE"
  rm -rf "$out.tmp/x" "$out"; mv "$out.tmp" "$out"
fi
[ -f "$inc/Python.h" ] || { echo "pyheaders.sh: no Python.h in $inc" >&2; exit 1; }
echo "$inc"
echo "$out/arch"

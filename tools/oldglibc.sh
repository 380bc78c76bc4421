#!/bin/bash
# Runs a command in an old Linux: a Debian bullseye root (glibc 2.31, the oldest release the
# machine's Debian mirror still serves) made once per machine with debootstrap, with CPython 3.13
# built inside it from the source tarball in shared/pythons (bullseye's own Python is 3.9, which
# goloop does not support). It is where the x86-64 manylinux_2_17 wheel must install and run:
# the build machine's glibc is newer, so a wheel that needs more than its tag says fails here.
#   tools/oldglibc.sh python3.13 -c 'import platform; print(platform.libc_ver())'
#   tools/oldglibc.sh bash -c 'python3.13 -m venv /tmp/v && /tmp/v/bin/pip install dist/goloop-*cp313-cp313-*x86_64.whl'
# The current directory and the folder above it are visible at the same paths inside (so a
# clone and its ../shared are), and the command runs where it was called. Needs root.
#   OLDGLIBC_ROOT   where the root is (default /opt/bullseye)
#   PYTHON_TARBALL  the CPython 3.13 source (default: the newest ../shared/pythons/Python-3.13.*.tar.xz
#                   beside this clone)
# Making it takes ~2 minutes (debootstrap) plus ~4 (CPython, on 2 cores); after that it is reused.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: oldglibc.sh COMMAND [ARG ...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=${OLDGLIBC_ROOT:-/opt/bullseye}
suite=bullseye
py=/opt/python-3.13/bin/python3.13

# the Debian mirror the host's apt uses (its sources, deb822 or one-line style)
mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p; s/^deb  *\(\[[^]]*\] *\)\?\([^ ]*\/debian\)\/* .*/\2/p' \
  /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)}
[ -n "$mirror" ] || { echo "oldglibc.sh: no Debian mirror found in /etc/apt (set DEBIAN_MIRROR)" >&2; exit 1; }

if [ ! -x "$root/usr/bin/gcc" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  echo "oldglibc.sh: making a Debian $suite root at $root (once per machine)" >&2
  rm -rf "$root"
  debootstrap --variant=minbase \
    --include=build-essential,libssl-dev,zlib1g-dev,libffi-dev,libbz2-dev,liblzma-dev,libsqlite3-dev,uuid-dev,ca-certificates,binutils,procps \
    "$suite" "$root" "$mirror" >/tmp/oldglibc-debootstrap.log 2>&1 ||
    { tail -20 /tmp/oldglibc-debootstrap.log >&2; exit 1; }
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || true
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"

bind() {  # bind DIR: DIR of the host at the same path inside the root
  mkdir -p "$root$1"
  mountpoint -q "$root$1" || mount --bind "$1" "$root$1"
}
for d in /proc /sys /dev /dev/pts; do bind "$d"; done

if [ ! -x "$root$py" ] || ! chroot "$root" "$py" -c 'import ssl, ctypes, venv' 2>/dev/null; then
  tarball=${PYTHON_TARBALL:-$(ls "$here"/../../shared/pythons/Python-3.13.*.tar.xz 2>/dev/null | sort -V | tail -1)}
  [ -f "$tarball" ] || { echo "oldglibc.sh: no CPython 3.13 source tarball (set PYTHON_TARBALL)" >&2; exit 1; }
  echo "oldglibc.sh: building CPython from $(basename "$tarball") in the $suite root (once per machine)" >&2
  rm -rf "$root/tmp/cpython"; mkdir -p "$root/tmp/cpython"
  tar -xJf "$tarball" -C "$root/tmp/cpython" --strip-components=1
  chroot "$root" /usr/bin/env PATH=/usr/bin:/bin bash -c 'cd /tmp/cpython &&
    ./configure --prefix=/opt/python-3.13 --with-ensurepip=install >configure.log 2>&1 &&
    make -j"$(nproc)" >make.log 2>&1 && make install >install.log 2>&1' ||
    { tail -30 "$root"/tmp/cpython/*.log >&2; exit 1; }
  rm -rf "$root/tmp/cpython"
  chroot "$root" "$py" -c 'import ssl, ctypes, venv'
fi

here_dir=$(pwd)
bash "$here/fresh_binds.sh" "$(dirname "$here_dir")" "$root"   # a bind left from a deleted clone
bind "$(dirname "$here_dir")"
exec chroot "$root" /usr/bin/env PATH="/opt/python-3.13/bin:/usr/local/bin:/usr/bin:/bin" HOME=/root \
  bash -c 'cd "$1" && shift && exec "$@"' oldglibc.sh "$here_dir" "$@"

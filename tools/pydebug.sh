#!/bin/bash
# Builds a debug CPython (./configure --with-pydebug) from a source tarball, once per machine:
# reference-count and GIL assertions on every C-API call, sys.gettotalrefcount(). `make
# test-pydebug` runs the extension's C against it.
#   tools/pydebug.sh [TARBALL]   -> $PYDEBUG_PREFIX/bin/python3 (default /opt/python/3.13d)
# TARBALL defaults to the newest Python-3.13.*.tar.xz in $PYTHONS_SRC (default: the shared/
# pythons folder beside this clone). Prints the interpreter's path on its last line; a finished
# build is reused (a few ms). About 4-5 minutes on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${PYDEBUG_PREFIX:-/opt/python/3.13d}
py=$prefix/bin/python3
if [ -x "$py" ] && "$py" -c 'import sys, ssl; sys.gettotalrefcount' 2>/dev/null; then echo "$py"; exit 0; fi
src=${PYTHONS_SRC:-$here/../../shared/pythons}
tarball=${1:-$(ls "$src"/Python-3.13.*.tar.xz 2>/dev/null | sort -V | tail -1 || true)}
[ -f "$tarball" ] || { echo "pydebug.sh: no Python-3.13.*.tar.xz in $src (set PYTHONS_SRC or pass one)" >&2; exit 1; }
if ! dpkg -s libssl-dev libffi-dev zlib1g-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq build-essential libssl-dev zlib1g-dev \
    libbz2-dev libreadline-dev libsqlite3-dev libffi-dev liblzma-dev uuid-dev libgdbm-dev >/dev/null
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work" --strip-components=1
cd "$work"
./configure --prefix="$prefix" --with-pydebug --with-ensurepip=install > configure.log 2>&1 \
  || { tail -30 configure.log; exit 1; }
make -j"$(nproc)" > make.log 2>&1 || { tail -30 make.log; exit 1; }
make install > install.log 2>&1 || { tail -30 install.log; exit 1; }
"$py" -c 'import ssl, ctypes, sys; sys.gettotalrefcount()' >&2
echo "$py"

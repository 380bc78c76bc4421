#!/bin/bash
# Runs inside another root (the aarch64 one under qemu: `make test-arm64`; the old-glibc one:
# `make test-oldglibc`): installs WHEEL into a venv of that root (made once, with the test
# dependencies), then runs pytest ARGS... against it, from the clone's tests_py (the installed
# wheel is the goloop they import, never the clone's sources: conftest drops the clone from
# sys.path).
#   wheel_tests.sh dist/goloop-...-aarch64.whl -q tests_py/test_tcp_echo.py ...
#   GOLOOP_TEST_DEPS   what the venv needs (default: pytest, pytest-timeout)
#   GOLOOP_TEST_VENV   where (default /root/goloop-test-venv, inside the root)
set -euo pipefail
wheel=${1:?usage: wheel_tests.sh WHEEL PYTEST-ARGS...}; shift
venv=${GOLOOP_TEST_VENV:-/root/goloop-test-venv}
deps=${GOLOOP_TEST_DEPS:-pytest pytest-timeout}
# a debootstrap --variant=minbase root has no /etc/hosts: `localhost` would not resolve
grep -qw localhost /etc/hosts 2>/dev/null || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >>/etc/hosts
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# the dependencies, once per list (pip itself takes a minute under emulation to find them there)
mark="$venv/.goloop-deps-$(echo "$deps" | md5sum | cut -c1-12)"
if [ ! -f "$mark" ]; then
  "${pip[@]}" install --only-binary :all: $deps >/tmp/wheel_tests-pip.log 2>&1 || { cat /tmp/wheel_tests-pip.log >&2; exit 1; }
  echo "$deps" >"$mark"
fi
"${pip[@]}" install --no-deps --force-reinstall "$wheel"
here=$(pwd)
cd /tmp  # import goloop from the venv, never from the clone
"$venv/bin/python" -c 'import goloop, platform, sys; print("wheel_tests.sh: goloop from", goloop.__file__, "on", platform.machine(), "glibc", platform.libc_ver()[1], "Python", sys.version.split()[0])'
cd "$here"
exec "$venv/bin/python" -P -m pytest -p no:cacheprovider "$@"

#!/bin/bash
# Runs inside the aarch64 root (`make test-arm64` calls it through shared/pythons/arm64.sh, under
# qemu): installs the aarch64 wheel WHEEL into a venv of the root (made once, with the test
# dependencies), then runs the named tests ARGS... against it (pytest, from the clone's
# tests_py: the installed wheel is the goloop they import, not the clone's sources).
#   arm64_tests.sh dist/goloop-...-aarch64.whl tests_py/test_tcp_echo.py ...
set -euo pipefail
wheel=${1:?usage: arm64_tests.sh WHEEL PYTEST-ARGS...}; shift
venv=${GOLOOP_ARM64_VENV:-/root/goloop-test-venv}
[ "$(uname -m)" = aarch64 ] || { echo "arm64_tests.sh: not on aarch64 ($(uname -m))" >&2; exit 2; }
deps="pytest pytest-timeout pytest-xdist httptools cryptography uvicorn starlette websockets httpx[http2] h2 anyio"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pytest, xdist, httptools, cryptography, uvicorn, starlette, websockets, httpx, h2, anyio' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip --disable-pip-version-check -q install --only-binary :all: $deps
fi
"$venv/bin/python" -m pip --disable-pip-version-check -q install --no-deps --force-reinstall "$wheel"
cd /tmp  # import goloop from the venv, never from the clone
"$venv/bin/python" -c 'import goloop, platform, sys; print("arm64_tests.sh: goloop from", goloop.__file__, "on", platform.machine(), sys.version.split()[0])'
cd - >/dev/null
exec "$venv/bin/python" -P -m pytest -p no:cacheprovider "$@"

"""h2spec (github.com/summerwind/h2spec, the HTTP/2 conformance suite) against goloop serve,
over h2c with prior knowledge and over TLS with ALPN h2: every case must pass.

h2spec is built once into build/h2spec-<machine>/ with `go install` (the Go module proxy);
the test is skipped, saying why, only when it cannot be built (no go, no network)."""
import fcntl
import os
import platform
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET

import pytest

from test_serve_http import serving
from test_tls import make_certs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H2SPEC_DIR = os.path.join(ROOT, "build", "h2spec-" + platform.machine())
H2SPEC = os.path.join(H2SPEC_DIR, "h2spec")
H2SPEC_MODULE = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"

# h2spec 3.5/2 sends "INVALID CONNECTION PREFACE\r\n\r\n" and wants the connection closed
# with nothing written. A plain listener of goloop serve speaks HTTP/1.1 and h2c with prior
# knowledge by default: there those bytes are a malformed HTTP/1.1 request, answered 400
# (RFC 9112 2.2), which h2spec reads as a bad frame. So the h2c run uses `http="h2"`
# (`--http h2`, HTTP/2 only: a connection that does not begin with the preface is closed
# without a word, RFC 9113 3.4), as an h2c-only deployment would; every case must pass.


def _works(path):
    try:
        return subprocess.run([path, "--version"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


@pytest.fixture(scope="module")
def h2spec():
    os.makedirs(H2SPEC_DIR, exist_ok=True)
    with open(os.path.join(H2SPEC_DIR, ".lock"), "w") as lock:  # the xdist workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _works(H2SPEC):
            return H2SPEC
        go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
        if go is None:
            pytest.skip("h2spec cannot be built: no go command")
        env = dict(os.environ, GOBIN=H2SPEC_DIR, GOFLAGS="-mod=mod")
        try:
            p = subprocess.run([go, "install", H2SPEC_MODULE], env=env, capture_output=True,
                               text=True, timeout=600, cwd=tempfile.gettempdir())
        except subprocess.TimeoutExpired:
            pytest.skip("h2spec cannot be built: go install timed out (no network?)")
        if p.returncode != 0 or not _works(H2SPEC):
            pytest.skip("h2spec cannot be built (no network?): " + (p.stderr or p.stdout)[-500:])
        return H2SPEC


async def hello(scope, receive, send):
    """Reads the request's body, then answers (a client that resets the stream or breaks
    the connection first makes the sends raise: not this test's business)."""
    if scope["type"] != "http":
        return
    try:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")]})
        await send({"type": "http.response.body", "body": b"Hello, world!"})
    except OSError:  # goloop.ClientDisconnected (ASGI 2.4: an OSError)
        pass


def run_h2spec(h2spec, port, *flags):
    """Runs every case; returns (summary line, the failed cases' ids, the output)."""
    with tempfile.TemporaryDirectory(prefix="goloop-h2spec-") as d:
        report = os.path.join(d, "report.xml")
        p = subprocess.run([h2spec, "-h", "127.0.0.1", "-p", str(port), "-o", "3", "-j", report, *flags],
                           capture_output=True, text=True, timeout=600)
        out = p.stdout + p.stderr
        with open(report) as f:
            xml = f.read()
    summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", out)
    assert summary, out
    failed = set()
    for case in ET.fromstring(xml).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add("%s: %s" % (case.get("package"), case.get("classname")))
    return summary, failed, out


def test_h2spec_h2c(h2spec):
    with serving(hello, http="h2") as server:
        summary, failed, out = run_h2spec(h2spec, server.port)
    total, passed, skipped, nfailed = map(int, summary.groups())
    assert total >= 145 and skipped == 0, out
    assert nfailed == 0 and passed == total and not failed, out


def test_h2spec_tls(h2spec):
    with tempfile.TemporaryDirectory(prefix="goloop-h2spec-certs-") as d:
        try:
            certs = make_certs(d)
        except RuntimeError as exc:  # no cryptography and no openssl
            pytest.skip(str(exc))
        with serving(hello, ssl_certfile=certs.server_cert, ssl_keyfile=certs.server_key) as server:
            summary, failed, out = run_h2spec(h2spec, server.port, "-t", "-k")
    total, passed, skipped, nfailed = map(int, summary.groups())
    assert total >= 145 and skipped == 0, out
    assert nfailed == 0 and passed == total and not failed, out

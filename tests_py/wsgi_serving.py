"""The server fixture of the real-application WSGI suites (test_serve_wsgi_flask.py,
test_serve_wsgi_django.py): one server subprocess serving an application of tests_py/wsgi_apps/,
its output in a log file the tests read, plus the small clients they share (raw HTTP/1.1
over a socket).

The server is `goloop serve --interface wsgi`. GOLOOP_WSGI_TEST_SERVER=gunicorn (or waitress)
runs the same suites against a reference WSGI server instead, which proves the tests themselves
right: the HTTP/2 tests need goloop serve and skip there."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile

import pytest
from nethelpers import free_port, wait_listening

HERE = os.path.dirname(os.path.abspath(__file__))
APPS_DIR = os.path.join(HERE, "wsgi_apps")
SERVER = os.environ.get("GOLOOP_WSGI_TEST_SERVER", "goloop")


@dataclasses.dataclass
class Served:
    port: int
    scheme: str
    log_path: str
    h2: bool  # the server speaks HTTP/2 (h2c with prior knowledge, ALPN h2 over TLS)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{'localhost' if self.scheme == 'https' else '127.0.0.1'}:{self.port}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def _has_interface_option() -> bool:
    from goloop.serve import config as _serve_config
    return "--interface" in _serve_config.parser().format_help()


def _command(target: str, port: int, certs) -> list[str]:
    if SERVER == "goloop":
        cmd = [sys.executable, "-m", "goloop", "serve", "--interface", "wsgi", target, "--port", str(port),
               "--threads", "4"]
        if certs:
            cmd += ["--ssl-certfile", certs.server_cert, "--ssl-keyfile", certs.server_key]
        return cmd
    if SERVER == "gunicorn":
        cmd = [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "gthread", "--threads", "4",
               "-b", f"127.0.0.1:{port}", target]
        if certs:
            cmd += ["--certfile", certs.server_cert, "--keyfile", certs.server_key]
        return cmd
    if SERVER == "waitress":
        if certs:
            pytest.skip("waitress has no TLS")
        return [sys.executable, "-m", "waitress", "--listen", f"127.0.0.1:{port}", "--threads", "4", target]
    raise ValueError(f"GOLOOP_WSGI_TEST_SERVER={SERVER!r}: goloop, gunicorn or waitress")


@contextlib.contextmanager
def wsgi_server(target: str, *, env: dict | None = None, certs=None):
    """Serves target (module:attribute, importable from tests_py/wsgi_apps/) until the block ends;
    yields a Served. The server's stdout and stderr go to Served.log_path."""
    if SERVER == "goloop" and not _has_interface_option():
        pytest.skip("goloop serve has no --interface wsgi yet")
    port = free_port()
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join([APPS_DIR, full_env.get("PYTHONPATH", "")])
    with tempfile.NamedTemporaryFile(prefix="goloop-wsgi-log-", suffix=".txt", delete=False) as logf:
        log_path = logf.name
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(_command(target, port, certs), cwd=APPS_DIR, env=full_env,
                                stdout=out, stderr=subprocess.STDOUT)
    served = Served(port, "https" if certs else "http", log_path, h2=SERVER == "goloop")
    try:
        wait_listening(proc, port, f"{SERVER} serving {target}", timeout=60)
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.unlink(log_path)
    # a server that crashed mid-module shows here rather than as a later connection refused
    assert proc.returncode in (0, -signal.SIGTERM), f"{SERVER} exited with {proc.returncode}"


def need_h2(served: Served) -> None:
    if not served.h2:
        pytest.skip(f"{SERVER} does not speak HTTP/2")


# ---------- raw HTTP/1.1 over a socket ----------

class RawConn:
    """One HTTP/1.1 connection driven by hand: send bytes, read whole responses (Content-Length,
    chunked, or to the close)."""

    def __init__(self, port: int, timeout: float = 20):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def _take_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("closed mid-line")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head: bool = False):
        """(status, {lower-case name: value} (repeated names joined with ', '), body, chunked)."""
        status_line = self._take_line()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = self._take_line()
            if not line:
                break
            k, _, v = line.decode("latin-1").partition(":")
            k = k.strip().lower()
            headers[k] = f"{headers[k]}, {v.strip()}" if k in headers else v.strip()
        if head or status in (204, 304) or 100 <= status < 200:
            return status, headers, b"", False
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._take_line().split(b";")[0], 16)
                if size == 0:
                    while self._take_line():
                        pass
                    return status, headers, body, True
                body += self._take(size)
                self._take(2)
        if "content-length" in headers:
            return status, headers, self._take(int(headers["content-length"])), False
        while self._fill():
            pass
        body, self.buf = self.buf, b""
        return status, headers, body, False


def raw_request(method: str, path: str, headers: dict | None = None, body: bytes = b"") -> bytes:
    h = {"Host": "127.0.0.1", **(headers or {})}
    if body and "Transfer-Encoding" not in h:
        h.setdefault("Content-Length", str(len(body)))
    return (f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + body


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"

"""goloop serve's static files (--static-path-route/--static-path-mount ...), served by Go
without calling the application: a real `python -m goloop serve` in a subprocess, ASGI and
WSGI applications, HTTP/1.1 on raw sockets (the exact bytes of each path reach the server),
HTTP/2 with httpx over TLS (ALPN) and h2c (prior knowledge), and the traversal set."""
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile

import pytest

from nethelpers import OutputLines
from test_serve_http import PYSHIM, read_response

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")

WAIT = 120

# the application writes each path it is called with to seen.txt (the test checks that no
# static path ever got there) and answers "app <path>"
APP = '''
import os

def _seen(path):
    with open("seen.txt", "a") as f:
        f.write(path + "\\n")

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    _seen(scope["path"])
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"app " + scope["path"].encode()})

def wsgi(environ, start_response):
    _seen(environ["PATH_INFO"])
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"app " + environ["PATH_INFO"].encode("latin-1")]
'''

BIG = os.urandom(1 << 20)


def make_tree(top):
    """top/public (the mount) and top/secret.txt beside it, which must never be served."""
    pub = os.path.join(top, "public")
    files = {"hello.txt": b"hello world", "app.js": b"console.log(1)", "app.js.br": b"BR", "app.js.gz": b"GZ",
             "sub/index.html": b"<h1>index</h1>", "big.bin": BIG, "style.css": b"p{}"}
    for name, data in files.items():
        p = os.path.join(pub, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    with open(os.path.join(top, "secret.txt"), "wb") as f:
        f.write(b"TOPSECRET")
    os.symlink("../secret.txt", os.path.join(pub, "escape"))
    os.symlink("..", os.path.join(pub, "updir"))
    os.symlink(os.path.join(top, "secret.txt"), os.path.join(pub, "abs"))
    os.symlink("hello.txt", os.path.join(pub, "inside"))
    return pub


class Serve:
    """`python -m goloop serve wapp:ATTR --port 0 ...args` in tmp_path; stderr collected."""

    def __init__(self, tmp_path, attr, *args, scheme="http"):
        (tmp_path / "wapp.py").write_text(APP)
        env = dict(os.environ, PYTHONPATH=PYSHIM)
        self.tmp = tmp_path
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "goloop", "serve", f"wapp:{attr}", "--port", "0", "--app-dir",
             str(tmp_path), *args], cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.out = OutputLines(self.proc.stderr)
        m = self.out.wait_for(scheme + r"://127\.0\.0\.1:(\d+)", timeout=WAIT)
        self.port = int(m[0].group(1))

    def seen(self):
        try:
            return (self.tmp / "seen.txt").read_text().split()
        except FileNotFoundError:
            return []

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def serve(tmp_path):
    made = []

    def start(attr, *args, scheme="http"):
        s = Serve(tmp_path, attr, *args, scheme=scheme)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()


def raw(port, method, path, headers=b""):
    """One request with the exact bytes of path, on its own connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (method.encode(), path.encode("latin-1"), headers))
        f = s.makefile("rb")
        if method == "HEAD":
            line = f.readline()
            hdrs = {}
            while (h := f.readline()) not in (b"\r\n", b""):
                k, v = h.decode("latin-1").split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
            return int(line.split()[1]), hdrs, b""
        return read_response(f)


TRAVERSAL = ["/static/../secret.txt", "/static/sub/../../secret.txt", "/static/%2e%2e/secret.txt",
             "/static/%2E%2E/secret.txt", "/static/..%2fsecret.txt", "/static/%2e%2e%2fsecret.txt",
             "/static/..%5csecret.txt", "/static/..\\secret.txt", "/static/hello.txt%00", "/static/%00/x",
             "/static/escape", "/static/updir/secret.txt", "/static/abs", "/static/./hello.txt"]


@pytest.mark.parametrize("attr", ["app", "wsgi"])
def test_static_http11(serve, tmp_path, attr):
    pub = make_tree(str(tmp_path))
    s = serve(attr, "--static-path-route", "/static", "--static-path-mount", pub,
              "--static-path-dir-to-file", "index.html", "--static-path-expires", "1h", "--interface",
              "asgi" if attr == "app" else "wsgi")
    st, h, body = raw(s.port, "GET", "/static/hello.txt")
    assert (st, body) == (200, b"hello world")
    assert h["content-type"] == "text/plain; charset=utf-8" and h["cache-control"] == "public, max-age=3600"
    etag, lastmod = h["etag"], h["last-modified"]
    st, h2, _ = raw(s.port, "HEAD", "/static/hello.txt")
    assert st == 200 and h2["content-length"] == "11"
    assert raw(s.port, "GET", "/static/hello.txt", b"If-None-Match: %s\r\n" % etag.encode())[0] == 304
    assert raw(s.port, "GET", "/static/hello.txt", b"If-Modified-Since: %s\r\n" % lastmod.encode())[0] == 304
    st, h, body = raw(s.port, "GET", "/static/hello.txt", b"Range: bytes=6-\r\n")
    assert (st, body, h["content-range"]) == (206, b"world", "bytes 6-10/11")
    st, h, _ = raw(s.port, "GET", "/static/hello.txt", b"Range: bytes=50-\r\n")
    assert (st, h["content-range"]) == (416, "bytes */11")
    assert raw(s.port, "GET", "/static/hello.txt", b"Range: bytes=0-1,3-4\r\n")[::2] == (200, b"hello world")
    st, h, body = raw(s.port, "GET", "/static/app.js", b"Accept-Encoding: gzip, br\r\n")
    assert (st, body, h["content-encoding"], h["vary"]) == (200, b"BR", "br", "Accept-Encoding")
    assert h["content-type"] == "text/javascript; charset=utf-8"
    assert raw(s.port, "GET", "/static/app.js", b"Accept-Encoding: gzip\r\n")[2] == b"GZ"
    assert raw(s.port, "GET", "/static/sub/")[::2] == (200, b"<h1>index</h1>")
    assert raw(s.port, "GET", "/static/big.bin")[2] == BIG  # sendfile(2)
    assert raw(s.port, "GET", "/static/inside")[2] == b"hello world"
    st, h, _ = raw(s.port, "POST", "/static/hello.txt")
    assert st == 405 and h["allow"] == "GET, HEAD"
    assert raw(s.port, "GET", "/static/nope")[0] == 404
    for path in TRAVERSAL:
        st, _, body = raw(s.port, "GET", path)
        assert st in (400, 404) and b"TOPSECRET" not in body, (path, st, body)
    # the application answers what is not under the route, and never saw a static path
    assert raw(s.port, "GET", "/staticx")[2] == b"app /staticx"
    assert raw(s.port, "GET", "/other")[2] == b"app /other"
    assert s.seen() == ["/staticx", "/other"]
    # the access log has the static responses (taken from Go twice a second)
    s.out.wait_for(r'"GET /static/hello\.txt HTTP/1\.1" 200', timeout=30)
    s.out.wait_for(r'"GET /static/\.\./secret\.txt HTTP/1\.1" 400', timeout=30)
    assert s.stop() == 0


@pytest.mark.parametrize("attr", ["app", "wsgi"])
def test_static_pipelined_past_the_pipeline(serve, tmp_path, attr):
    """60 requests in one write, static and the application's in turn: past the pipeline's
    depth (32) the server hands them over as earlier ones are answered; a static one is still
    answered by Go, and every answer comes in the requests' order."""
    pub = make_tree(str(tmp_path))
    s = serve(attr, "--static-path-route", "/static", "--static-path-mount", pub, "--interface",
              "asgi" if attr == "app" else "wsgi")
    paths = ["/static/hello.txt" if i % 2 else f"/a{i}" for i in range(60)]
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p.encode() for p in paths))
        f = sock.makefile("rb")
        got = [read_response(f)[2] for _ in paths]
    assert got == [b"hello world" if p.startswith("/static") else b"app " + p.encode() for p in paths]
    # (WSGI's pool threads call the application in any order)
    assert sorted(s.seen()) == sorted(p for p in paths if not p.startswith("/static"))
    assert s.stop() == 0


@pytest.fixture(scope="module")
def certs():
    from test_tls import make_certs
    with tempfile.TemporaryDirectory(prefix="goloop-static-") as d:
        try:
            yield make_certs(d)
        except RuntimeError as exc:
            pytest.skip(str(exc))


@pytest.mark.parametrize("attr", ["app", "wsgi"])
@pytest.mark.parametrize("proto", ["h2-tls", "h2c", "http1-tls"])
def test_static_http2_and_tls(serve, tmp_path, certs, attr, proto):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("h2")
    pub = make_tree(str(tmp_path))
    args = ["--static-path-mount", pub, "--interface", "asgi" if attr == "app" else "wsgi"]
    tls = proto != "h2c"
    if tls:
        args += ["--ssl-certfile", certs.server_cert, "--ssl-keyfile", certs.server_key]
    s = serve(attr, *args, scheme="https" if tls else "http")
    base = f"{'https' if tls else 'http'}://127.0.0.1:{s.port}"
    kw = {"verify": certs.client_context()} if tls else {}
    with httpx.Client(http1=proto == "http1-tls", http2=proto != "http1-tls", timeout=30, **kw) as c:
        r = c.get(base + "/static/hello.txt")
        assert r.http_version == ("HTTP/1.1" if proto == "http1-tls" else "HTTP/2")
        assert (r.status_code, r.content) == (200, b"hello world")
        assert r.headers["cache-control"] == "public, max-age=86400"  # the default, 1d
        assert c.get(base + "/static/hello.txt", headers={"if-none-match": r.headers["etag"]}).status_code == 304
        r = c.get(base + "/static/big.bin", headers={"range": "bytes=1000-"})
        assert r.status_code == 206 and r.content == BIG[1000:]
        assert c.get(base + "/static/big.bin").content == BIG
        r = c.get(base + "/static/app.js", headers={"accept-encoding": "br"})
        assert r.headers["content-encoding"] == "br" and r.headers["vary"] == "Accept-Encoding"
        assert c.head(base + "/static/hello.txt").headers["content-length"] == "11"
        assert c.request("PUT", base + "/static/hello.txt").status_code == 405
        for path in ("/static/%2e%2e/secret.txt", "/static/..%2fsecret.txt", "/static/escape", "/static/abs"):
            r = c.get(base + path)
            assert r.status_code in (400, 404) and b"TOPSECRET" not in r.content, path
        assert c.get(base + "/other").content == b"app /other"
    assert s.seen() == ["/other"]
    assert s.stop() == 0


def test_static_options_checked(tmp_path):
    pub = make_tree(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    (tmp_path / "wapp.py").write_text(APP)
    for args, msg in [(["--static-path-route", "/s"], "needs --static-path-mount"),
                      (["--static-path-mount", str(tmp_path / "none")], "is not a directory"),
                      (["--static-path-mount", pub, "--static-path-route", "s"], "must begin with '/'"),
                      (["--static-path-mount", pub, "--static-path-mount", pub], "give one route per directory"),
                      (["--static-path-mount", pub, "--static-path-expires", "soon"], "static_path_expires"),
                      (["--static-path-mount", pub, "--static-path-dir-to-file", "a/b"], "file name")]:
        p = subprocess.run([sys.executable, "-P", "-m", "goloop", "serve", "wapp:app", "--app-dir", str(tmp_path),
                            *args], env=env, capture_output=True, text=True, timeout=WAIT)
        assert p.returncode == 2 and msg in p.stderr, (args, p.stderr)


def test_expires_parsing():
    from goloop.serve.static import expires_seconds
    assert [expires_seconds(v) for v in ("0", "30", "30s", "5m", "1h", "1d", "2w", 7)] == \
        [0, 30, 30, 300, 3600, 86400, 2 * 604800, 7]
    for bad in ("-1", "1y", "x", True):
        with pytest.raises(ValueError):
            expires_seconds(bad)


def test_static_access_log_fmt(serve, tmp_path):
    pub = make_tree(str(tmp_path))
    fmt = "AL|%(addr)s|%(method)s|%(path)s|%(protocol)s|%(status)d|%(size)s|%(dt_ms).1f|%(user_agent)s|%(referer)s"
    s = serve("app", "--static-path-mount", pub, "--access-log-fmt", fmt)
    raw(s.port, "GET", "/static/hello.txt?v=1", b"User-Agent: ua/1\r\nReferer: http://r/\r\n")
    raw(s.port, "GET", "/other")
    m = s.out.wait_for(r"AL\|127\.0\.0\.1:\d+\|GET\|/static/hello\.txt\?v=1\|HTTP/1\.1\|200\|11\|[\d.]+\|ua/1\|http://r/",
                       timeout=30)
    assert m
    s.out.wait_for(r"AL\|127\.0\.0\.1:\d+\|GET\|/other\|HTTP/1\.1\|200\|10\|[\d.]+\|-\|-", timeout=30)
    assert re.search(r"\|HTTP/1\.1\|", s.out.log())

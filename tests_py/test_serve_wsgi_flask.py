"""A real Flask application (tests_py/wsgi_apps/flask_app.py), unchanged, under
`goloop serve --interface wsgi`: routes, JSON, form posts and file uploads, streamed responses,
send_file (ranges, conditional requests), an error as a 500 with its traceback in the server's
log, and flask.request.environ; through httpx and raw sockets, over HTTP/1.1 and HTTP/2 (h2c with
prior knowledge, and TLS with ALPN). One server per module (plus one TLS server for the TLS tests).
GOLOOP_WSGI_TEST_SERVER=gunicorn runs the same tests on gunicorn (see wsgi_serving.py)."""
import concurrent.futures
import hashlib
import json
import os
import tempfile
import threading
import time

import pytest

pytest.importorskip("flask")
httpx = pytest.importorskip("httpx")

from test_serve_h2_tls import RawH2  # noqa: E402 (certs: conftest's fixture)
from wsgi_serving import RawConn, chunked, need_h2, raw_request, wsgi_server  # noqa: E402

pytestmark = pytest.mark.timeout(120)

BOOM = "flask-app-boom-7f3a"  # flask_app.BOOM
DATA = os.urandom(300_000)  # what /file serves


@pytest.fixture(scope="module")
def data_file():
    with tempfile.NamedTemporaryFile(prefix="goloop-flask-", suffix=".bin", delete=False) as f:
        f.write(DATA)
    yield f.name
    os.unlink(f.name)


@pytest.fixture(scope="module")
def server(data_file):
    with wsgi_server("flask_app:app", env={"FLASK_APP_DATA_FILE": data_file}) as s:
        yield s


@pytest.fixture(scope="module")
def tls_server(data_file, certs):
    with wsgi_server("flask_app:app", env={"FLASK_APP_DATA_FILE": data_file}, certs=certs) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def h2client(server):
    need_h2(server)
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=30) as c:  # h2c, prior knowledge
        yield c


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# ---------- routes, JSON, forms, uploads (HTTP/1.1 and h2c) ----------

@pytest.fixture(params=["http/1.1", "h2c"])
def any_client(request, client):
    if request.param == "h2c":
        return request.getfixturevalue("h2client")
    return client


def test_hello(any_client, request):
    r = any_client.get("/")
    assert r.status_code == 200 and r.text == "Hello, World!"
    assert r.headers["content-type"].startswith("text/html")
    assert r.http_version == {"h2c": "HTTP/2", "http/1.1": "HTTP/1.1"}[request.node.callspec.params["any_client"]]


def test_routes_and_json(any_client):
    r = any_client.get("/users/42", params={"q": "a b&c"})
    assert r.status_code == 200 and r.json() == {"id": 42, "name": "user42", "q": "a b&c"}
    assert any_client.get("/users/0").status_code == 404
    assert any_client.get("/users/abc").status_code == 404
    assert any_client.delete("/users/4").status_code == 405


def test_post_json(any_client):
    r = any_client.post("/json", json={"numbers": [1, 2, 39], "name": "é"})
    assert r.status_code == 201
    assert r.json() == {"got": {"numbers": [1, 2, 39], "name": "é"}, "total": 42}


def test_form_post(any_client):
    r = any_client.post("/form", content="name=J%C3%B6rg+X&tag=a&tag=b",
                        headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.json() == {"name": "Jörg X", "tags": ["a", "b"], "content_type": "application/x-www-form-urlencoded"}


def test_file_upload(any_client):
    big = os.urandom(1_000_000)
    files = [("doc", ("report.txt", b"hello upload\n", "text/plain")),
             ("blob", ("blob.bin", big, "application/octet-stream"))]
    r = any_client.post("/upload", files=files, data={"note": "two files"})
    assert r.status_code == 200
    out = r.json()
    assert out["note"] == "two files"
    assert out["files"]["doc"] == {"filename": "report.txt", "size": 13, "sha256": sha(b"hello upload\n"),
                                   "mimetype": "text/plain"}
    assert out["files"]["blob"]["size"] == len(big) and out["files"]["blob"]["sha256"] == sha(big)


def test_streaming_response(any_client):
    with any_client.stream("GET", "/stream/500") as r:
        assert r.status_code == 200
        body = b"".join(r.iter_bytes())
    lines = body.decode().splitlines()
    assert len(lines) == 500 and lines[0] == "/stream/500 chunk 0" and lines[-1] == "/stream/500 chunk 499"


def test_send_file(any_client):
    r = any_client.get("/file")
    assert r.status_code == 200 and r.content == DATA
    assert r.headers["content-length"] == str(len(DATA))
    etag, modified = r.headers["etag"], r.headers["last-modified"]
    r = any_client.get("/file", headers={"range": "bytes=1000-1999"})
    assert r.status_code == 206 and r.content == DATA[1000:2000]
    assert r.headers["content-range"] == f"bytes 1000-1999/{len(DATA)}"
    assert any_client.get("/file", headers={"if-none-match": etag}).status_code == 304
    assert any_client.get("/file", headers={"if-modified-since": modified}).status_code == 304
    r = any_client.get("/download")
    assert r.content == DATA and "attachment" in r.headers["content-disposition"]
    r = any_client.head("/file")
    assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == str(len(DATA))


def test_error_is_500_with_traceback_in_log(any_client, server):
    r = any_client.get("/boom")
    assert r.status_code == 500
    assert BOOM not in r.text  # the traceback goes to the log, not to the client
    log = server.log()
    assert "Traceback (most recent call last)" in log and f"RuntimeError: {BOOM}" in log
    assert any_client.get("/").status_code == 200  # and the server goes on


def test_concurrent_requests(server):
    # a client per thread: httpcore's connection pool is not safe to share between threads
    # running at once (a free-threaded build: has_expired read a deadline another thread cleared)
    local, clients = threading.local(), []

    def get(i):
        if not hasattr(local, "c"):
            local.c = httpx.Client(base_url=server.url, timeout=30)
            clients.append(local.c)
        return local.c.get(f"/users/{i}").json()["id"]

    try:
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            results = list(ex.map(get, range(1, 41)))
    finally:
        for c in clients:
            c.close()
    assert results == list(range(1, 41))


# ---------- the environ as Flask sees it ----------

def test_environ_fields(client, server):
    r = client.get("/environ/caf%C3%A9/x%2Fy", params=[("a", "1"), ("a", "2"), ("b", "é")],
                   headers=[("X-Many", "one"), ("X-Many", "two")])
    e = r.json()
    assert e["REQUEST_METHOD"] == "GET" and e["SCRIPT_NAME"] == ""
    # PEP 3333: PATH_INFO is the percent-decoded path, its bytes as latin-1; Flask decodes it as UTF-8
    assert e["PATH_INFO"] == "/environ/café/x/y".encode().decode("latin-1")
    assert e["path"] == "/environ/café/x/y"
    assert e["QUERY_STRING"] == "a=1&a=2&b=%C3%A9" and e["args"] == {"a": ["1", "2"], "b": ["é"]}
    assert e["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert e["SERVER_PORT"] == str(server.port) and e["SERVER_NAME"]
    assert e["HTTP_HOST"] == f"127.0.0.1:{server.port}"
    assert e["REMOTE_ADDR"] == "127.0.0.1" and e["remote_addr"] == "127.0.0.1"
    assert e["HTTP_X_MANY"] in ("one, two", "one,two")
    assert e["wsgi.url_scheme"] == "http" and e["is_secure"] is False
    assert e["wsgi.version"] == [1, 0] and e["wsgi.multithread"] is True and e["wsgi.run_once"] is False
    assert isinstance(e["wsgi.multiprocess"], bool)
    assert e["has_input"] and e["has_errors"]
    assert e["url"].startswith(f"http://127.0.0.1:{server.port}/environ/caf")
    assert e["CONTENT_LENGTH"] in (None, "", "0") and e["body_len"] == 0


def test_environ_of_a_post(client):
    r = client.post("/environ?x=1", content=b"k=v" * 100, headers={"content-type": "text/plain"})
    e = r.json()
    assert e["REQUEST_METHOD"] == "POST" and e["CONTENT_TYPE"] == "text/plain"
    assert e["CONTENT_LENGTH"] == "300" and e["body_len"] == 300 and e["QUERY_STRING"] == "x=1"


# ---------- raw sockets (HTTP/1.1) ----------

def test_raw_keepalive_pipelined(server):
    with RawConn(server.port) as c:
        c.send(raw_request("GET", "/") + raw_request("GET", "/users/7") + raw_request("HEAD", "/"))
        st, h, body, _ = c.response()
        assert (st, body) == (200, b"Hello, World!")
        st, h, body, _ = c.response()
        assert st == 200 and json.loads(body)["id"] == 7
        st, h, body, _ = c.response(head=True)
        assert st == 200 and h["content-length"] == "13"
        c.send(raw_request("GET", "/"))  # the connection is still usable
        assert c.response()[2] == b"Hello, World!"


def test_raw_chunked_request_body(server):
    with RawConn(server.port) as c:
        c.send(raw_request("POST", "/json", {"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
                           chunked(b'{"numbers": [', b"40, 2", b"]}")))
        st, h, body, _ = c.response()
        assert st == 201 and json.loads(body)["total"] == 42


def test_raw_unread_body_does_not_corrupt_next_request(server):
    """GET-only route answered 405 without reading the body: the next request on the connection
    is parsed from after the body (the server drains it, or closes the connection)."""
    junk = b"GET /users/666 HTTP/1.1\r\nHost: x\r\n\r\n" * 200
    with RawConn(server.port) as c:
        c.send(raw_request("POST", "/", {"Content-Type": "text/plain"}, junk) + raw_request("GET", "/users/5"))
        st, _, _, _ = c.response()
        assert st == 405
        try:
            st, _, body, _ = c.response()
        except ConnectionError:
            return  # closed instead of drained: also correct
        assert st == 200 and json.loads(body)["id"] == 5


def test_raw_streamed_response_is_chunked(server):
    with RawConn(server.port) as c:
        c.send(raw_request("GET", "/stream/50"))
        st, h, body, was_chunked = c.response()
    assert st == 200 and was_chunked and "content-length" not in h
    assert body.decode().splitlines()[-1] == "/stream/50 chunk 49"


def test_raw_http10_streamed_response_ends_with_close(server):
    with RawConn(server.port) as c:
        c.send(b"GET /stream/20 HTTP/1.0\r\nHost: x\r\n\r\n")
        st, h, body, was_chunked = c.response()
    assert st == 200 and not was_chunked and body.decode().count("chunk") == 20


def test_client_gone_mid_stream_closes_the_iterable(client, server):
    """A client that leaves in the middle of an endless streamed response: the server calls the
    response's close() (Flask then closes the generator) and goes on serving."""
    with RawConn(server.port) as c:
        c.send(raw_request("GET", "/endless/gone1"))
        got = 0
        while got < 200_000:
            got += len(c.sock.recv(65536))
    wait_closed(client, "gone1")
    assert client.get("/").text == "Hello, World!"


def test_h2_stream_reset_mid_stream_closes_the_iterable(client, server):
    """The same over HTTP/2 (h2c): the client resets the stream (RST_STREAM CANCEL) mid-stream;
    the iterable is closed and the connection goes on (another stream is answered)."""
    need_h2(server)
    import h2.events

    c = RawH2(server.port)
    try:
        c.headers(1, "/endless/gone2", method="GET")
        c.flush()
        got = 0
        while got < 100_000:
            for ev in c.events():
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id == 1:
                    got += len(ev.data)
                    c.conn.acknowledge_received_data(ev.flow_controlled_length, 1)
        c.conn.reset_stream(1, error_code=8)  # CANCEL
        c.flush()
        wait_closed(client, "gone2")
        c.headers(3, "/", method="GET")
        c.flush()
        body, done = b"", False
        while not done:
            for ev in c.events():
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id == 3:
                    body += ev.data
                done = done or (isinstance(ev, h2.events.StreamEnded) and ev.stream_id == 3)
        assert body == b"Hello, World!"
    finally:
        c.close()


def wait_closed(client, tag):
    deadline = time.monotonic() + 30
    while tag not in client.get("/closed").json():
        assert time.monotonic() < deadline, "the iterable of a stream whose client left was never closed"
        time.sleep(0.1)


# ---------- TLS with ALPN ----------

def test_tls_http11_and_h2_alpn(tls_server, certs):
    ctx = certs.client_context()
    with httpx.Client(base_url=tls_server.url, verify=ctx, timeout=30) as c:
        r = c.get("/environ")
        assert r.http_version == "HTTP/1.1"
        e = r.json()
        assert e["wsgi.url_scheme"] == "https" and e["is_secure"] is True and e["url"].startswith("https://")
    need_h2(tls_server)
    with httpx.Client(base_url=tls_server.url, verify=ctx, http2=True, timeout=30) as c:
        r = c.get("/environ")
        assert r.http_version == "HTTP/2"
        e = r.json()
        assert e["wsgi.url_scheme"] == "https" and e["SERVER_PROTOCOL"] == "HTTP/2"
        r = c.get("/file")
        assert r.http_version == "HTTP/2" and r.content == DATA
        big = os.urandom(200_000)
        r = c.post("/upload", files={"f": ("f.bin", big)})
        assert r.json()["files"]["f"]["sha256"] == sha(big)
        with c.stream("GET", "/stream/100") as r:
            assert b"".join(r.iter_bytes()).count(b"chunk") == 100

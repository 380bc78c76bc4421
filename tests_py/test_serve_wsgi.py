"""goloop serve --interface wsgi: PEP 3333 against real clients (raw sockets, http.client,
httpx over HTTP/2 and TLS). The apps are wrapped in wsgiref.validate where they keep to
the rules it checks (its assertions inside the app become a 500 the tests would see)."""
import hashlib
import io
import json
import logging
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import threading
from contextlib import contextmanager
from wsgiref.validate import validator

import pytest

from goloop.serve import server as _serve
from goloop.serve import wsgi as _wsgi
from nethelpers import free_port, interrupt, wait_listening
from test_serve_http import PYSHIM, connect, get, read_response, serving

WSGI = dict(interface="wsgi")


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"Hello, world!"]


def env_app(environ, start_response):
    """The environ's str/bool/tuple items, as JSON."""
    out = {k: v for k, v in environ.items() if isinstance(v, (str, bool, tuple, int))}
    body = json.dumps(out).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def raw(server, data, n=1):
    """Sends data on a new connection; n responses read from it."""
    with connect(server) as s:
        s.sendall(data)
        f = s.makefile("rb")
        return [read_response(f) for _ in range(n)]


def test_hello_validated_and_serve_function():
    with serving(validator(hello), **WSGI) as server:
        assert get(server, "/")[::2] == (200, b"Hello, world!")
        assert get(server, "/x?y=1", method="POST", body=b"abc")[::2] == (200, b"Hello, world!")
    with serving(hello, **WSGI) as server:  # a list: its content-length, one write
        assert get(server, "/")[1]["content-length"] == "13"


def test_environ_cgi_variables():
    with serving(env_app, root_path="/root", threads=2, **WSGI) as server:
        req = (b"GET /root/caf%C3%A9/x%2Fy?q=%C3%A9&a=1 HTTP/1.1\r\nHost: example.com:8080\r\n"
               b"X-Multi: a\r\nX-Multi: b\r\nX_Under: dropped\r\nContent-Type: text/x\r\n"
               b"Content-Length: 2\r\nCookie: a=1\r\n\r\nhi")
        [(st, _, body)] = raw(server, req)
        e = json.loads(body)
        assert st == 200
        assert e["REQUEST_METHOD"] == "GET"
        assert e["SCRIPT_NAME"] == "/root"
        assert e["PATH_INFO"] == "/café/x/y".encode().decode("latin-1")  # PEP 3333: latin-1 of the bytes
        assert e["QUERY_STRING"] == "q=%C3%A9&a=1"
        assert (e["CONTENT_TYPE"], e["CONTENT_LENGTH"]) == ("text/x", "2")
        assert "HTTP_CONTENT_TYPE" not in e and "HTTP_CONTENT_LENGTH" not in e
        assert e["HTTP_X_MULTI"] == "a, b"
        assert "HTTP_X_UNDER" not in e
        assert e["HTTP_HOST"] == "example.com:8080" and e["HTTP_COOKIE"] == "a=1"
        assert (e["SERVER_NAME"], e["SERVER_PORT"]) == ("127.0.0.1", str(server.port))
        assert e["SERVER_PROTOCOL"] == "HTTP/1.1"
        assert e["REMOTE_ADDR"] == "127.0.0.1" and int(e["REMOTE_PORT"]) > 0
        assert e["wsgi.version"] == [1, 0] and e["wsgi.url_scheme"] == "http"
        assert (e["wsgi.multithread"], e["wsgi.multiprocess"], e["wsgi.run_once"]) == (True, False, False)
    with serving(env_app, threads=1, **WSGI) as server:
        [(st, _, body)] = raw(server, b"GET /p HTTP/1.0\r\nX-Forwarded-For: 10.1.2.3\r\n"
                                      b"X-Forwarded-Proto: https\r\n\r\n")
        e = json.loads(body)
        assert e["wsgi.multithread"] is False and e["SERVER_PROTOCOL"] == "HTTP/1.0"
        assert e["SCRIPT_NAME"] == "" and e["PATH_INFO"] == "/p"
        # proxy headers from a trusted peer (127.0.0.1 by default)
        assert (e["REMOTE_ADDR"], e["wsgi.url_scheme"]) == ("10.1.2.3", "https")
        # the same thread, the next requests: the connection's own items (the thread keeps the
        # environ's connection items filled in a template of its own), each client's port
        for _ in range(2):
            with connect(server) as s:
                s.sendall(b"GET /q HTTP/1.1\r\nHost: x\r\n\r\n")
                _, _, body = read_response(s.makefile("rb"))
                e = json.loads(body)
                assert (e["SERVER_PROTOCOL"], e["REMOTE_ADDR"], e["wsgi.url_scheme"]) == ("HTTP/1.1", "127.0.0.1", "http")
                assert (e["REMOTE_PORT"], e["SERVER_PORT"]) == (str(s.getsockname()[1]), str(server.port))


def test_method_path_query_port_set_only_when_not_the_templates():
    """A pool thread's environ template has GET, "/", "" and its last client's port (set only
    when a request differs): each request of one thread, on two connections in turn, sees its own."""
    def app(environ, start_response):
        start_response("200 OK", [])
        keys = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "REMOTE_PORT")
        return [repr([environ[k] for k in keys]).encode()]

    reqs = [("GET", "/", ""), ("POST", "/x", "a=1"), ("GET", "/", "q"), ("GET", "/y", ""), ("PUT", "/", ""),
            ("DELETE", "/", ""), ("GET", "/", "")]
    with serving(app, threads=1, **WSGI) as server, connect(server) as s1, connect(server) as s2:
        files = {s: s.makefile("rb") for s in (s1, s2)}
        for i, (method, path, query) in enumerate(reqs + reqs):
            s = (s1, s2)[i // 3 % 2]  # three requests on one, three on the other, ...
            target = path + ("?" + query if query else "")
            s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
            st, _, body = read_response(files[s])
            assert (st, body) == (200, repr([method, path, query, str(s.getsockname()[1])]).encode())


def test_header_keys_and_values_from_the_threads_caches():
    """A pool thread keeps the strs of header keys and values for its next requests, in slots by
    their first and last 8 bytes and length: names and values that differ only in the middle,
    repeated ones joined (an identical repeat too), latin-1 ones, long ones are each right."""
    def app(environ, start_response):
        body = json.dumps({k: v for k, v in environ.items() if k.startswith("HTTP_")}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    mid = "aaaaaaaa%sbbbbbbbb"
    long = "L" * 70
    reqs = [
        ([("X_Under", "dropped"), ("X-Multi", "same"), ("X-Multi", "same"), ("Cookie", "a=1"), ("Cookie", "b=\xe9"),
          ("x-aaaaaaaa1bbbbbbbb", "k1"), ("x-aaaaaaaa2bbbbbbbb", "k2"), ("X-A", mid % 1), ("X-Long", long + "1")],
         {"HTTP_X_MULTI": "same, same", "HTTP_COOKIE": "a=1; b=\xe9", "HTTP_X_AAAAAAAA1BBBBBBBB": "k1",
          "HTTP_X_AAAAAAAA2BBBBBBBB": "k2", "HTTP_X_A": mid % 1, "HTTP_X_LONG": long + "1"}),
        ([("X_Under", "dropped"), ("X-A", mid % 2), ("X-Long", long + "2"), ("X-Multi", "\xe9"), ("X-Multi", "same"), ("X-L1", "\xe9")],
         {"HTTP_X_A": mid % 2, "HTTP_X_LONG": long + "2", "HTTP_X_MULTI": "\xe9, same", "HTTP_X_L1": "\xe9"}),
        ([("X-A", mid % 1), ("Cookie", "a=1")], {"HTTP_X_A": mid % 1, "HTTP_COOKIE": "a=1"}),
    ]
    with serving(app, threads=1, **WSGI) as server, connect(server) as s:
        f = s.makefile("rb")
        for headers, want in reqs:
            head = "".join(f"{n}: {v}\r\n" for n, v in headers).encode("latin-1")
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
            st, _, body = read_response(f)
            assert (st, json.loads(body)) == (200, {"HTTP_HOST": "x", **want})


def reader_app(environ, start_response):
    """Reads the body with every method of wsgi.input; answers what each returned."""
    inp = environ["wsgi.input"]
    out = [inp.read(3), inp.readline(), inp.readline(2), inp.readlines(1)]
    out += list(inp)
    out += [inp.read(), inp.read(5), inp.readline()]
    body = json.dumps([b.decode() if isinstance(b, bytes) else [x.decode() for x in b] for b in out]).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]


BODY = b"abcdef\nline2\nline3\nline4\nrest"
EXPECT = ["abc", "def\n", "li", ["ne2\n"], "line3\n", "line4\n", "rest", "", "", ""]


def test_input_content_length_and_chunked():
    with serving(reader_app, **WSGI) as server:  # (validator allows read(n) only)
        st, _, body = get(server, "/", method="POST", body=BODY)
        assert (st, json.loads(body)) == (200, EXPECT)
        # chunked, in pieces that split the lines
        chunks = [BODY[i:i + 4] for i in range(0, len(BODY), 4)]
        data = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        [(st, _, body)] = raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + data)
        assert (st, json.loads(body)) == (200, EXPECT)


def test_input_streams_as_app_reads():
    """The body arrives while the app reads it: read(n) waits for the client's next part."""
    got = []

    def app(environ, start_response):
        inp = environ["wsgi.input"]
        got.append(inp.read(5))
        ready.set()
        got.append(inp.read())
        start_response("200 OK", [])
        return [b"".join(got)]

    ready = threading.Event()
    with serving(app, **WSGI) as server, connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
        assert ready.wait(20)
        s.sendall(b"world")
        st, _, body = read_response(s.makefile("rb"))
        assert (st, body) == (200, b"helloworld")


def test_input_of_a_known_length_read_in_parts_as_it_arrives():
    """read() and large read(n) of a body with a Content-Length take its parts straight into
    the result as they arrive (past the first MiB the result grows with them); readline and
    small reads between them are served from the parts taken; a read at the end."""
    body = b"first line\n" + bytes(range(256)) * (3 * 4096 + 7)
    got = {}

    def app(environ, start_response):
        inp = environ["wsgi.input"]
        got["line"] = inp.readline()
        got["some"] = inp.read(100_000)
        got["small"] = b"".join(inp.read(1000) for _ in range(300))  # (served from the parts taken)
        got["rest"] = inp.read()
        got["end"] = inp.read()
        start_response("200 OK", [])
        return [b"%d" % sum(len(v) for v in got.values())]

    with serving(app, **WSGI) as server, connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 300_000):
            s.sendall(body[i:i + 300_000])
        st, _, out = read_response(s.makefile("rb"))
    assert (st, out) == (200, b"%d" % len(body))
    assert got["line"] == b"first line\n"
    assert got["line"] + got["some"] + got["small"] + got["rest"] == body
    assert (len(got["some"]), len(got["small"]), got["end"]) == (100_000, 300_000, b"")


def test_input_claimed_length_costs_no_memory_before_the_body():
    """A client's Content-Length is not memory taken at once: a read() of a body claimed at
    1 TB, of which 5 bytes come before the client leaves, raises the disconnect."""
    seen = []
    done = threading.Event()

    def app(environ, start_response):
        try:
            environ["wsgi.input"].read()
        except Exception as e:
            seen.append(type(e).__name__)
        done.set()
        start_response("200 OK", [])
        return [b""]

    with serving(app, **WSGI) as server:
        with connect(server) as s:
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\nhello")
        assert done.wait(20)
    assert seen == ["ClientDisconnected"]


def test_unread_body_then_next_request():
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    with serving(app, **WSGI) as server:
        # the whole body came: dropped, the connection serves the next request
        r = raw(server, b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nXXXXX"
                        b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n", n=2)
        assert [(st, body) for st, _, body in r] == [(200, b"/a"), (200, b"/b")]
        # the body is still coming: the response closes the connection, what follows is never a request
        with connect(server) as s:
            s.sendall(b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nGET /d HTTP/1.1\r\n\r\n")
            f = s.makefile("rb")
            st, hdrs, body = read_response(f)
            assert (st, body, hdrs.get("connection")) == (200, b"/c", "close")
            assert f.read() == b""


def test_threads_run_requests_at_once_and_limit_answers_503():
    n = 3
    barrier = threading.Barrier(n, timeout=30)

    def app(environ, start_response):
        barrier.wait()  # passes only when n requests are in the app at once
        start_response("200 OK", [])
        return [b"ok"]

    with serving(app, threads=n, **WSGI) as server:
        results = []
        ts = [threading.Thread(target=lambda: results.append(get(server, "/")[0])) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert results == [200] * n

    release, entered = threading.Event(), threading.Event()

    def blocking(environ, start_response):
        entered.set()
        release.wait(30)
        start_response("200 OK", [])
        return [b"late"]

    with serving(blocking, threads=1, limit_concurrency=1, **WSGI) as server:
        first = []
        t = threading.Thread(target=lambda: first.append(get(server, "/")))
        t.start()
        assert entered.wait(20)
        assert get(server, "/")[0] == 503
        release.set()
        t.join(20)
        assert first[0][::2] == (200, b"late")


def test_queued_requests_wait_for_a_thread():
    """More requests than threads: the engine queues them, each is answered."""
    def app(environ, start_response):
        start_response("200 OK", [])
        return [environ["QUERY_STRING"].encode()]

    with serving(app, threads=1, **WSGI) as server:
        out = {}
        ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, get(server, f"/?{i}")[2])) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert out == {i: str(i).encode() for i in range(8)}


class Stream:
    """An iterable that yields parts until told to stop, recording close()."""

    def __init__(self, parts=None, gate=None):
        self.parts, self.gate = parts, gate
        self.closed = threading.Event()

    def __iter__(self):
        if self.parts is not None:
            for p in self.parts:
                if self.gate is not None and p == b"B":
                    assert self.gate.wait(20)
                yield p
            return
        while True:  # forever: until the client goes away
            yield b"x" * 65536

    def close(self):
        self.closed.set()


def test_stream_is_chunked_and_sent_as_yielded():
    gate = threading.Event()
    it = Stream([b"A", b"", b"B"], gate)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return it

    with serving(validator(app), **WSGI) as server, connect(server) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        f = s.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += f.read(1)
        assert b"transfer-encoding: chunked" in head.lower()
        assert f.readline() == b"1\r\n" and f.readline() == b"A\r\n"  # before the app yields B
        gate.set()
        assert f.readline() == b"1\r\n" and f.readline() == b"B\r\n"
        assert f.readline() == b"0\r\n"
        assert it.closed.wait(20)


class ListBacked:
    """An answer shaped like Django's HttpResponse: iterates its own list of parts (a
    list_iterator), has close(), declares no Content-Length."""

    def __init__(self, parts, start_at=0):
        self.parts, self.start_at, self.closed = parts, start_at, 0

    def __iter__(self):
        it = iter(self.parts)
        for _ in range(self.start_at):  # parts already taken: what is left decides
            next(it)
        return it

    def close(self):
        self.closed += 1


@pytest.mark.parametrize("parts,start_at,chunked", [
    ([b"one part"], 0, False),
    ([], 0, False),
    ([b"skipped", b"last part"], 1, False),
    ([b"two ", b"parts"], 0, True),
    ((b"tuple",), 0, False),
])
def test_list_iterator_answers_get_a_content_length(parts, start_at, chunked):
    answers = []

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        answers.append(ListBacked(parts, start_at))
        return answers[-1]

    with serving(app, **WSGI) as server:
        got = raw(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", n=2)
    body = b"".join(parts[start_at:])
    for status, headers, data in got:
        assert (status, data) == (200, body)
        if chunked:
            assert headers.get("transfer-encoding") == "chunked" and "content-length" not in headers
        else:
            assert headers.get("content-length") == str(len(body)) and "transfer-encoding" not in headers
    assert [a.closed for a in answers] == [1, 1]


def test_list_iterator_answer_of_a_wrong_type_is_a_500(caplog):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ListBacked(["not bytes"])

    with serving(app, **WSGI) as server:
        (status, _, _), = raw(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 500
    assert "must be bytes" in caplog.text


def test_client_gone_mid_stream_close_called():
    it = Stream()

    def app(environ, start_response):
        start_response("200 OK", [])
        return it

    with serving(app, **WSGI) as server:
        s = connect(server)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # a reset: the iterator (blocked by backpressure) stops
        assert it.closed.wait(30), "close() was not called"


def test_file_wrapper(tmp_path):
    data = os.urandom(300_000)
    p = tmp_path / "f.bin"
    p.write_bytes(data)

    def app(environ, start_response):
        f = open(p, "rb")
        f.seek(10)
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](f, 8192)

    class NotAFile(io.BytesIO):
        def fileno(self):
            raise io.UnsupportedOperation("fileno")

    def app2(environ, start_response):
        start_response("200 OK", [])
        return environ["wsgi.file_wrapper"](NotAFile(b"abc" * 1000))

    with serving(app, **WSGI) as server:  # (validator would hide the wrapper)
        st, hdrs, body = get(server, "/")
        assert (st, hdrs["content-length"], body == data[10:]) == (200, str(len(data) - 10), True)
    with serving(app2, **WSGI) as server:
        assert get(server, "/")[::2] == (200, b"abc" * 1000)


def test_write_callable():
    def app(environ, start_response):
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"a")
        write(b"bc")
        return [b"d"]

    with serving(validator(app), **WSGI) as server:
        assert get(server, "/")[::2] == (200, b"abcd")


def test_objects_kept_past_their_request():
    """wsgi.input, start_response and write kept by the application past their request: their
    calls fail later, also while the thread serves another request, and do not touch it (a pool
    thread reuses its objects for its next request only when nothing else refers to them)."""
    kept = {}

    def app(environ, start_response):
        path, inp = environ["PATH_INFO"], environ["wsgi.input"]
        out = []
        if path.startswith("/keep-"):  # keeps one (its body left unread)
            write = start_response("200 OK", [("Content-Type", "text/plain")])
            kept[path[6:]] = {"input": inp, "start": start_response, "write": write, "environ": environ}[path[6:]]
        else:
            calls = {"input": lambda o: o.read(), "start": lambda o: o("200 OK", []), "write": lambda o: o(b"old"),
                     "environ": lambda o: o["wsgi.input"].read()}
            for name, obj in kept.items():
                assert obj is not {"input": inp, "start": start_response, "environ": environ}.get(name)
                try:
                    calls[name](obj)
                    out.append(name + ": no error")
                except (ValueError, RuntimeError) as e:
                    out.append(f"{name}: {type(e).__name__}")
            write = start_response("200 OK", [("Content-Type", "text/plain")])
            write(inp.read() + b"|")
        return ["|".join(out).encode()]

    def post(s, f, path, body):
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (path, len(body), body))
        st, _, got = read_response(f)
        assert st == 200
        return got

    with serving(app, threads=1, **WSGI) as server, connect(server) as s:
        f = s.makefile("rb")
        assert post(s, f, b"/", b"a") == b"a|"
        want = []
        for name, err in (("input", "ValueError"), ("start", "RuntimeError"), ("write", "RuntimeError"),
                          ("environ", "ValueError")):
            assert post(s, f, b"/keep-" + name.encode(), b"unread") == b""
            want.append(f"{name}: {err}")
            for body in (b"first", b"second"):  # new objects, then those reused
                assert post(s, f, b"/", body) == body + b"|" + "|".join(want).encode()


def test_exc_info(caplog):
    seen = []

    def before(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise ValueError("boom")
        except ValueError:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"sorry"]

    def after(environ, start_response):
        write = start_response("200 OK", [])
        write(b"partial")
        try:
            raise KeyError("late")
        except KeyError:
            try:
                start_response("500 Internal Server Error", [], sys.exc_info())
            except KeyError as exc:  # PEP 3333: re-raised once the headers were sent
                seen.append(exc)
                raise

    with serving(before, **WSGI) as server:
        assert get(server, "/")[::2] == (503, b"sorry")
    with serving(after, **WSGI) as server, caplog.at_level(logging.ERROR, "goloop.error"):
        with connect(server) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = s.makefile("rb").read()  # the response is cut: the connection closes
        assert data.startswith(b"HTTP/1.1 200") and b"partial" in data and not data.endswith(b"0\r\n\r\n")
        assert len(seen) == 1
        assert any("Exception in WSGI application" in r.message for r in caplog.records)


@pytest.mark.parametrize("status,headers", [
    ("200 OK", [("X-Bad", "a\r\nInjected: 1")]),
    ("200 OK", [("Bad Name", "v")]),
    # names and values checked 8 bytes at a time: a bad byte in a word and in the tail
    ("200 OK", [("X-Long-Header-Name:x", "v")]),
    ("200 OK", [("X-Long-Header\x7fName", "v")]),
    ("200 OK", [("X-Long-Header-N\xe9me", "v")]),
    ("200 OK", [("X-Long", "a long\rvalue")]),
    ("200 OK", [("X-Long", "0123456789abcdef\x00")]),
    ("200 OK", [("X", 1)]),
    ("20 OK", []),
    ("200OK", []),
    (200, []),
])
def test_bad_status_or_headers_are_500(status, headers, caplog):
    def app(environ, start_response):
        start_response(status, headers)
        return [b"never"]

    with serving(app, **WSGI) as server, caplog.at_level(logging.ERROR, "goloop.error"):
        st, hdrs, body = get(server, "/")
        assert (st, body) == (500, b"Internal Server Error") and "injected" not in hdrs
        assert any("Exception in WSGI application" in r.message for r in caplog.records)


def test_status_and_header_checks_at_word_edges(caplog):
    """Status reasons, header names and values are checked 8 bytes at a time, the last word
    overlapping the one before: good ones of every length around a word pass, a bad byte
    anywhere is a 500."""
    good = [("200 " + "r" * n, [("X" * m if m else "X", "\t\xe9" + "v" * m)]) for n, m in
            ((0, 0), (1, 6), (7, 7), (8, 8), (9, 9), (15, 15), (16, 16), (17, 17))]
    good.append(("200 OK", [("!#$%&'*+-.^_`|~09azAZ", "a value with: colons, quotes \" and \x7f")]))
    bad = [("200 Reason with\x01 a control byte", []), ("200 A long reason\x7f", []), ("000 Zero", []),
           ("2x0 OK", []), ("200 OK", [("Content-Typ:", "v")]), ("200 OK", [("X-Eight\x7f", "v")]),
           ("200 OK", [("X-Sixteen-Bytes ", "v")]), ("200 OK", [("X", "1234567\n")]),
           ("200 OK", [("X", "0123456789\r1")]), ("200 OK", [("X", "01234567\x00")])]
    cases = good + bad

    def app(environ, start_response):
        status, headers = cases[int(environ["PATH_INFO"][1:])]
        start_response(status, headers)
        return [b"ok"]

    with serving(app, **WSGI) as server, caplog.at_level(logging.ERROR, "goloop.error"):
        for i, (status, headers) in enumerate(cases):
            st, hdrs, body = get(server, f"/{i}")  # (a 500 closes its connection)
            if i < len(good):
                assert (st, body, hdrs[headers[0][0].lower()]) == (int(status[:3]), b"ok", headers[0][1].strip()), status
            else:
                assert (st, body) == (500, b"Internal Server Error"), (status, headers)


def test_status_reason_and_header_names_as_written():
    """HTTP/1.1 sends start_response's status as the application gave it (its reason phrase,
    even an empty one) and its header names as written, as gunicorn does; the engine's own
    headers stay lower-case and it reads the application's framing headers whatever their
    case. HTTP/2 has no reason phrase and lower-cases the names (h2 refuses upper case)."""
    statuses = {"/custom": "299 Custom Thing", "/std": "200 OK", "/other": "404 Nothing Here",
                "/empty": "200 ", "/latin": "200 Caf\xe9"}

    def app(environ, start_response):
        start_response(statuses[environ["PATH_INFO"]],
                       [("X-Custom-Header", "v"), ("Content-TYPE", "text/plain"), ("CONTENT-LENGTH", "2")])
        return [b"ok"]

    def stream(environ, start_response):
        start_response("200 Streamed", [("X-Mixed-Case", "1")])
        return iter([b"a", b"b"])

    def head_of(server, path):
        with connect(server) as s:
            s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
            data = s.makefile("rb").read()
        head, _, body = data.partition(b"\r\n\r\n")
        return head.split(b"\r\n"), body

    with serving(app, **WSGI) as server:
        for path, status in statuses.items():
            lines, body = head_of(server, path)
            assert lines[0] == b"HTTP/1.1 " + status.encode("latin-1"), lines
            assert b"X-Custom-Header: v" in lines and b"Content-TYPE: text/plain" in lines, lines
            # the application's content-length is the framing: no other, no chunking
            assert [x for x in lines if x.lower().startswith((b"content-length:", b"transfer-encoding:"))] == \
                [b"CONTENT-LENGTH: 2"], lines
            assert b"connection: close" in lines and body == b"ok", lines
        httpx = pytest.importorskip("httpx")
        pytest.importorskip("h2")
        with httpx.Client(http1=False, http2=True) as c:
            r = c.get(f"http://127.0.0.1:{server.port}/custom")
            assert (r.http_version, r.status_code, r.content) == ("HTTP/2", 299, b"ok")
            assert (b"x-custom-header", b"v") in r.headers.raw and r.headers["content-type"] == "text/plain"
    with serving(stream, **WSGI) as server:
        lines, body = head_of(server, "/")
        assert lines[0] == b"HTTP/1.1 200 Streamed" and b"X-Mixed-Case: 1" in lines, lines
        assert b"transfer-encoding: chunked" in lines and body == b"1\r\na\r\n1\r\nb\r\n0\r\n\r\n", (lines, body)

    async def asgi_app(scope, receive, send):  # ASGI (unchanged): its header bytes as given
        await send({"type": "http.response.start", "status": 299, "headers": [(b"X-Custom-Header", b"v")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(asgi_app) as server:
        lines, body = head_of(server, "/")
        assert lines[0] == b"HTTP/1.1 299 " and b"X-Custom-Header: v" in lines and body == b"ok", lines


def test_body_complete_at_its_content_length(caplog):
    """An iterable's part that completes the Content-Length the application gave ends the
    response then (Werkzeug's and Django's responses are such iterables): the next request
    on the connection is answered while the iterable has not ended yet; a part after it is
    the application's error (logged), which the complete response does not show."""
    release = threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/next":
            start_response("200 OK", [("Content-Length", "4")])
            return [b"next"]
        write = start_response("200 OK", [("Content-Type", "text/plain"), ("content-length", " 4 ")])
        write(b"ab")  # write() and the iterable's parts count together

        def parts():
            yield b"cd"
            assert release.wait(60)
            if environ["PATH_INFO"] == "/long":
                yield b"too long"
        return parts()

    with serving(app, threads=2, **WSGI) as server, caplog.at_level(logging.ERROR, "goloop.error"):
        try:
            with connect(server) as s:
                f = s.makefile("rb")
                s.sendall(b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(f)[::2] == (200, b"abcd")
                s.sendall(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(f)[::2] == (200, b"next")
                assert not release.is_set()  # the first iterable still runs
        finally:
            release.set()
        with connect(server) as s:
            f = s.makefile("rb")
            s.sendall(b"GET /long HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(f)[::2] == (200, b"abcd")
        logged = threading.Event()
        for _ in range(400):  # the log comes after the response
            text = "\n".join(r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)
            if "Response content longer than Content-Length" in text:
                break
            logged.wait(0.05)
        assert "Response content longer than Content-Length" in text, text


def test_iterable_ends_its_request_at_its_content_length(caplog):
    """An iterable (not a generator) whose part completes its Content-Length ends its request
    with that part (one call into Go per request, as Werkzeug's and Django's answers are):
    what it does after (its close() here fails, logged) no longer concerns the response, and
    the connection stays for the next request; a write() then is too long. A generator's request ends after its close(), which failing closes the connection."""
    kept = {}

    class Answer:
        def __init__(self, environ, write):
            self.environ, self.write, self.parts = environ, write, [b"ab", b"cd"]

        def __iter__(self):
            return self

        def __next__(self):
            if not self.parts:
                raise StopIteration
            return self.parts.pop(0)

        def close(self):
            try:
                self.write(b"late")
            except Exception as e:
                kept[self.environ["PATH_INFO"]] = repr(e)
            raise RuntimeError("close failed")

    def app(environ, start_response):
        write = start_response("200 OK", [("Content-Length", "4")])
        if environ["PATH_INFO"] == "/gen":
            def gen():
                try:
                    yield b"abcd"
                finally:
                    raise RuntimeError("close failed")
            return gen()
        return Answer(environ, write)

    with serving(app, threads=1, **WSGI) as server, caplog.at_level(logging.ERROR, "goloop.error"):
        with connect(server) as s:
            f = s.makefile("rb")
            for path in ("/a", "/b"):
                s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
                assert read_response(f)[::2] == (200, b"abcd")
        with connect(server) as s:
            # a request pipelined behind it: not answered (ended early, it would be)
            s.sendall(b"GET /gen HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
            f = s.makefile("rb")
            status, headers, body = read_response(f)
            assert (status, body) == (200, b"abcd")
            s.settimeout(30)
            assert f.read() == b""  # closed after the generator's close() failed
    assert all("longer than Content-Length" in kept[p] for p in ("/a", "/b")), kept
    text = "\n".join(r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)
    assert text.count("close failed") >= 3, text


def test_errors_500_with_traceback_and_wsgi_errors(caplog):
    def app(environ, start_response):
        environ["wsgi.errors"].write("to the log\n")
        if environ["PATH_INFO"] == "/raise":
            raise RuntimeError("app failed")
        if environ["PATH_INFO"] == "/nostart":
            return [b"x"]
        start_response("200 OK", [])
        return [b"fine"]

    with serving(app, **WSGI) as server, caplog.at_level(logging.ERROR, "goloop.error"):
        assert get(server, "/raise")[::2] == (500, b"Internal Server Error")
        assert get(server, "/nostart")[0] == 500
        assert get(server, "/ok")[::2] == (200, b"fine")
        text = "\n".join(r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)
        assert "to the log" in text and "app failed" in text


@pytest.fixture
def certs():
    from test_tls import make_certs
    with tempfile.TemporaryDirectory(prefix="goloop-wsgi-") as d:
        try:
            yield make_certs(d)
        except RuntimeError as exc:
            pytest.skip(str(exc))


def test_http2_over_tls_and_h2c(certs, tmp_path):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("h2")
    data = os.urandom(200_000)
    (tmp_path / "f").write_bytes(data)

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/file":  # a file wrapper over TLS and HTTP/2: read by Go
            start_response("200 OK", [])
            return environ["wsgi.file_wrapper"](open(tmp_path / "f", "rb"))
        return reader_app(environ, start_response)

    with serving(app, ssl_certfile=certs.server_cert, ssl_keyfile=certs.server_key, **WSGI) as server:
        with httpx.Client(http2=True, verify=ssl.create_default_context(cafile=certs.ca_cert)) as c:
            r = c.post(f"https://localhost:{server.port}/", content=BODY)
            assert (r.http_version, r.status_code, r.json()) == ("HTTP/2", 200, EXPECT)
            r = c.get(f"https://localhost:{server.port}/file")
            assert (r.http_version, r.status_code, r.content == data) == ("HTTP/2", 200, True)
        with httpx.Client(http1=True, http2=False, verify=ssl.create_default_context(cafile=certs.ca_cert)) as c:
            r = c.get(f"https://localhost:{server.port}/file")
            assert (r.http_version, r.status_code, r.content == data) == ("HTTP/1.1", 200, True)
    with serving(env_app, **WSGI) as server:
        with httpx.Client(http1=False, http2=True) as c:
            r = c.get(f"http://127.0.0.1:{server.port}/h2?x", headers=[("cookie", "a=1"), ("cookie", "b=2")])
            e = r.json()
            assert (r.http_version, e["SERVER_PROTOCOL"], e["QUERY_STRING"]) == ("HTTP/2", "HTTP/2", "x")
            assert e["HTTP_COOKIE"] == "a=1; b=2"


def test_http2_bodies_read_whole_and_in_parts():
    """Over HTTP/2 (h2c), bodies past the stream's flow-control window: wsgi.input.read() of
    one with a content-length (taken straight into its result, a window update for each part
    taken), read(n) in parts, and one without a content-length."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("h2")
    data = os.urandom(1_000_000)

    def app(environ, start_response):
        inp = environ["wsgi.input"]
        if environ["PATH_INFO"] == "/parts":
            parts = []
            while part := inp.read(70_000):
                parts.append(part)
            body = b"".join(parts)
        else:
            body = inp.read()
        out = b"%d %s" % (len(body), hashlib.sha256(body).hexdigest().encode())
        start_response("200 OK", [("Content-Length", str(len(out)))])
        return [out]

    want = b"%d %s" % (len(data), hashlib.sha256(data).hexdigest().encode())
    with serving(app, **WSGI) as server, httpx.Client(http1=False, http2=True, timeout=30) as c:
        for path in ("/", "/parts"):
            r = c.post(f"http://127.0.0.1:{server.port}{path}", content=data)
            assert (r.http_version, r.status_code, r.content) == ("HTTP/2", 200, want)
        r = c.post(f"http://127.0.0.1:{server.port}/", content=iter([data[:300_000], data[300_000:]]))
        assert (r.status_code, r.content) == (200, want)


def test_auto_interface_detection():
    async def asgi_fn(scope, receive, send):
        pass

    class AsgiObj:
        async def __call__(self, scope, receive, send):
            pass

    class Asgi2:
        def __init__(self, scope):
            pass

    class WsgiObj:
        def __call__(self, environ, start_response):
            pass

    def awaitable_fn(scope, receive, send):  # ASGI: a plain function returning an awaitable
        return asgi_fn(scope, receive, send)

    assert _wsgi.is_asgi(asgi_fn) and _wsgi.is_asgi(AsgiObj()) and _wsgi.is_asgi(Asgi2)
    assert _wsgi.is_asgi(awaitable_fn) and _wsgi.is_asgi(lambda *a: None)
    assert not _wsgi.is_asgi(hello) and not _wsgi.is_asgi(WsgiObj())
    assert _wsgi.wants_wsgi(hello, "auto") and not _wsgi.wants_wsgi(hello, "asgi")
    assert _wsgi.wants_wsgi(asgi_fn, "wsgi")
    with serving(hello) as server:  # interface auto: WSGI
        assert get(server, "/")[::2] == (200, b"Hello, world!")


def test_options_refused():
    with pytest.raises(_serve.ConfigError, match="lifespan"):
        _serve.Server(hello, interface="wsgi", lifespan="on")
    with pytest.raises(_serve.ConfigError, match="threads"):
        _serve.Server(hello, interface="wsgi", threads=0)
    with pytest.raises(_serve.ConfigError, match="interface"):
        _serve.Server(hello, interface="asgi2")


@contextmanager
def cli(tmp_path, module, source, *args):
    """`goloop serve --interface wsgi module:app --port N *args` in a folder holding source as
    module.py; yields N, then stops it (SIGINT) and checks it said it shut down."""
    (tmp_path / f"{module}.py").write_text(source)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    proc = subprocess.Popen([sys.executable, "-m", "goloop", "serve", "--interface", "wsgi", f"{module}:app",
                             "--port", str(port), *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_listening(proc, port, "goloop serve --interface wsgi")
        yield port
    finally:
        out = interrupt(proc)
    assert "Shutting down" in out, out


def test_cli_one_command(tmp_path):
    src = textwrap.dedent("""
        def app(environ, start_response):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"cli %s %s" % (environ["SCRIPT_NAME"].encode(), str(environ["wsgi.multiprocess"]).encode())]
    """)
    with cli(tmp_path, "wsgiapp", src, "--threads", "2", "--root-path", "/r", "--workers", "2") as port:
        st, _, body = get(type("S", (), {"port": port}), "/r/x")
        assert (st, body) == (200, b"cli /r True")  # two worker processes: wsgi.multiprocess
    r = subprocess.run([sys.executable, "-m", "goloop", "serve", "--interface", "wsgi", "wsgiapp:app",
                        "--lifespan", "on", "--port", str(free_port())], cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=PYSHIM), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "lifespan" in r.stderr


def test_auto_interface_wsgi_refuses_lifespan_on_in_one_line(tmp_path):
    """--lifespan on with an application --interface auto finds to be WSGI: refused as the
    options check_options refuses (one line `goloop serve: ...`, exit status 2, no
    traceback), in one process and from the workers (the master never loads the app)."""
    (tmp_path / "wsgiapp.py").write_text(textwrap.dedent("""
        def app(environ, start_response):
            start_response("200 OK", [])
            return [b"x"]
    """))
    want = "goloop serve: --lifespan on: a WSGI application has no lifespan protocol (--interface auto found"
    for extra in ([], ["--workers", "2"]):
        r = subprocess.run([sys.executable, "-m", "goloop", "serve", "wsgiapp:app", "--lifespan", "on",
                            "--port", str(free_port()), *extra], cwd=tmp_path,
                           env=dict(os.environ, PYTHONPATH=PYSHIM), capture_output=True, text=True, timeout=60)
        lines = r.stderr.splitlines()
        assert r.returncode == 2 and "Traceback" not in r.stderr, (extra, r.stderr)
        if extra:  # each worker's line, then the master gives up
            assert [x for x in lines if x.startswith(want)] and "No worker could start" in r.stderr, r.stderr
        else:
            assert len(lines) == 1 and lines[0].startswith(want), r.stderr


def test_readme_flask_example(tmp_path):
    """The README's Flask block, served by its one command."""
    pytest.importorskip("flask")
    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
    m = re.search(r"<!-- readme-flask -->\s*```python\n(.*?)```", open(readme, encoding="utf-8").read(), re.S)
    assert m, "README lost its Flask example (the readme-flask marker)"
    with cli(tmp_path, "app", m.group(1)) as port:
        server = type("S", (), {"port": port})
        st, hdrs, body = get(server, "/?name=goloop")
        assert (st, json.loads(body), hdrs["content-type"]) == (200, {"hello": "goloop"}, "application/json")


def test_access_log_and_max_requests(caplog):
    with caplog.at_level(logging.INFO, "goloop.access"):
        with serving(hello, access_log=True, limit_max_requests=2, **WSGI) as server:
            assert get(server, "/a?b=1")[0] == 200
            assert get(server, "/c", method="POST", body=b"x")[0] == 200
            for _ in range(200):  # the limit stops the server (its thread ends)
                if not server.sockets or server.should_exit:
                    break
                threading.Event().wait(0.05)
            assert server.should_exit
    lines = [r.getMessage() for r in caplog.records if r.name == "goloop.access"]
    assert any(line.endswith('"GET /a?b=1 HTTP/1.1" 200 OK') for line in lines), lines
    assert any(line.endswith('"POST /c HTTP/1.1" 200 OK') for line in lines), lines


def test_backpressure_reaches_the_iterator():
    """A client that does not read stops the iterator: it yields what the socket and the
    engine's bounded output hold (a few MiB at most), not the 1 GiB it could."""
    yielded = [0]

    def app(environ, start_response):
        start_response("200 OK", [])

        def parts():
            for _ in range(16384):  # 1 GiB if nothing stopped it
                yielded[0] += 1
                yield b"x" * 65536
        return parts()

    with serving(app, **WSGI) as server, connect(server) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        last, still = -1, 0
        for _ in range(600):  # until the count stays the same for a second (or 30 s)
            threading.Event().wait(0.05)
            still = still + 1 if yielded[0] == last else 0
            last = yielded[0]
            if still >= 20:
                break
        assert 0 < yielded[0] < 1024, yielded[0]  # under 64 MiB: the iterator waits for the client
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


def test_websocket_upgrade_is_a_plain_request():
    """WSGI has no WebSocket: an upgrade request reaches the app as an ordinary request (its
    Upgrade and Connection headers in the environ), the app's response is sent, and the
    connection closes after it (what follows the upgrade request is never read as a request)."""
    def app(environ, start_response):
        body = json.dumps([environ.get("HTTP_UPGRADE"), environ.get("HTTP_CONNECTION"),
                           environ.get("HTTP_SEC_WEBSOCKET_KEY"), environ["PATH_INFO"]]).encode()
        start_response("426 Upgrade Required", [("Content-Type", "application/json")])
        return [body]

    with serving(app, **WSGI) as server, connect(server) as s:
        s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                  b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        f = s.makefile("rb")
        st, hdrs, body = read_response(f)
        assert st == 426 and hdrs.get("connection") == "close"
        assert json.loads(body) == ["websocket", "Upgrade", "dGhlIHNhbXBsZSBub25jZQ==", "/ws"]
        assert f.read() == b""

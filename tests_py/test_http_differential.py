"""Differential fuzz: goloop.http against httptools (llhttp), the oracle.

Seeded random mutations of a corpus of valid requests and responses (byte flips, insertions
of CR/LF/SP/TAB/NUL/obs-text and of protocol words, deletions, duplications), split into
random feed_data pieces and fed, piece by piece, to both parsers. The verdict (accepted, or
the exception class, with the offset of HttpParserUpgrade) and the callback sequence (url,
status, headers, the getters at on_headers_complete and on_message_complete, body bytes,
messages completed) must be equal, unless the case falls in one of the classes of
DIFFERENCES, each listed with its reason.

    GOLOOP_HTTP_FUZZ_CASES=200000 python3 -P -m pytest tests_py/test_http_differential.py
    GOLOOP_HTTP_FUZZ_SEED=7 ...      # another seed (the default is fixed)

Run from the repository root with -P (the Go folder goloop/ would shadow the package).
"""
from __future__ import annotations

import os
import random
import time

import pytest

ht = pytest.importorskip("httptools")
from goloop import http as gh  # noqa: E402

CASES = int(os.environ.get("GOLOOP_HTTP_FUZZ_CASES", "20000"))
SEED = int(os.environ.get("GOLOOP_HTTP_FUZZ_SEED", "20261201"))

REQUESTS = [
    b"GET /index.html?x=1#f HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
    b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
    b"POST /submit HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world",
    b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    b"POST /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;name=value;x\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n",
    b"PUT /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
    b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    b"GET /3 HTTP/1.1\r\nHost: c\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-Spaces:   padded value\r\nEmpty:\r\nTab:\tv\r\n\r\n",
    b"GET /chat HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello",
    b"POST /u HTTP/1.1\r\nUpgrade: h2c\r\nConnection: upgrade\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n0\r\n\r\nPRI",
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01",
    b"GET http://user@example.com:8080/p?q HTTP/1.1\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"DELETE /a/b%20c HTTP/1.1\r\nCookie: a=b; c=d\r\nUser-Agent: fuzz/1.0\r\n\r\n",
]

RESPONSES = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.0 404 Not Found\r\nContent-Length: 2\r\n\r\nno",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nokHTTP/1.0 204 X\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nDATA",
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the connection closes",
]

# Bytes and words the mutations insert or substitute.
BYTES = b"\r\n \t\x00\x7f\x80\xc3\xa9\xff:;,=\"/?#%@\\"
WORDS = [
    b"\r\n", b"\r\n\r\n", b" ", b"HTTP/1.0", b"HTTP/1.1", b"HTTP/2.0", b"HTTP/0.9", b"RTSP/1.0",
    b"ICE/1.0", b"ANNOUNCE", b"SOURCE", b"OPTIONS", b"PURGE", b"FOO", b"CONNECT", b"HEAD",
    b"PRI", b"chunked", b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n",
    b"Connection: close\r\n", b"Connection: keep-alive\r\n", b"Connection: upgrade\r\n",
    b"Upgrade: x\r\n", b"0\r\n\r\n", b"\xc3\xa9", b"*", b"http://a/", b"a:1", b"204", b"101",
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        op = rng.randrange(6)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:  # flip to another byte
            i = min(i, len(b) - 1)
            b[i] = rng.choice(BYTES) if rng.random() < 0.7 else rng.randrange(256)
        elif op == 1:  # insert a byte
            b[i:i] = bytes([rng.choice(BYTES)])
        elif op == 2 and b:  # delete 1..4 bytes
            del b[i:i + rng.randint(1, 4)]
        elif op == 3 and b:  # duplicate a range
            j = min(len(b), i + rng.randint(1, 12))
            b[j:j] = b[i:j]
        elif op == 4:  # insert a word
            b[i:i] = rng.choice(WORDS)
        elif b:  # replace a range by a word
            b[i:i + rng.randint(1, 8)] = rng.choice(WORDS)
    return bytes(b)


def split(rng: random.Random, data: bytes) -> list[bytes]:
    if rng.random() < 0.4 or len(data) < 2:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 6))))
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


class Recorder:
    def __init__(self, response: bool):
        self.response = response
        self.events: list[tuple] = []
        self.parser = None

    def _state(self):
        p = self.parser
        extra = p.get_status_code() if self.response else p.get_method()
        return (p.get_http_version(), p.should_keep_alive(), p.should_upgrade(), extra)

    def _add(self, kind, value):
        # httptools calls on_url/on_status/on_body once per piece: join the pieces.
        if self.events and self.events[-1][0] == kind:
            self.events[-1] = (kind, self.events[-1][1] + value)
        else:
            self.events.append((kind, value))

    def on_url(self, url):
        self._add("url", url)

    def on_status(self, status):
        self._add("status", status)

    def on_header(self, name, value):
        self.events.append(("header", name, value))

    def on_headers_complete(self):
        self.events.append(("headers_complete", self._state()))

    def on_body(self, body):
        self._add("body", body)

    def on_message_complete(self):
        self.events.append(("complete", self._state()))


def run(mod, pieces: list[bytes], response: bool):
    """Feeds the pieces; returns (events, verdict): verdict is "ok", the exception class
    name, or ("HttpParserUpgrade", piece index, offset)."""
    rec = Recorder(response)
    parser = (mod.HttpResponseParser if response else mod.HttpRequestParser)(rec)
    rec.parser = parser
    verdict = "ok"
    for k, piece in enumerate(pieces):
        try:
            parser.feed_data(piece)
        except mod.HttpParserUpgrade as e:
            verdict = ("HttpParserUpgrade", k, e.args[0] if e.args else None)
            break
        except mod.HttpParserError as e:
            verdict = type(e).__name__
            break
    return rec.events, verdict


def normalize(events, verdict):
    """What must be equal. After an error, the events of the message that failed are
    dropped: llhttp hands out the request target and body bytes as they stream by, goloop
    the target once the line is whole; httptools calls on_header for a header once the next
    line begins, goloop once its line is whole."""
    last = max((i for i, e in enumerate(events) if e[0] == "complete"), default=-1)
    if verdict == "ok":
        # a message whose header section is unfinished: httptools holds its last header
        # back until the next line begins and streams the target; compare from
        # on_headers_complete on.
        if not any(e[0] == "headers_complete" for e in events[last + 1:]):
            return events[:last + 1], verdict
        while events[-1][0] == "header":  # the same for an unfinished trailer section
            events = events[:-1]
        return events, verdict
    if isinstance(verdict, tuple):
        return events, verdict
    return events[:last + 1], verdict


# Allowed differences: (name, reason, predicate on the case). A case that differs and
# matches no predicate fails the test. Keep this table in step with the README's
# compatibility section.
def _theirs_fail_when_continued(case):
    """httptools rejects the input once one more line ending arrives."""
    return run(ht, case.pieces + [b"\r\n"], case.response)[1] != "ok"


DIFFERENCES: list[tuple[str, str, object]] = [
    ("header checked at its line end",
     "goloop checks a header (empty Content-Length, say) once its line ends; llhttp once the "
     "next line begins: on input cut right there goloop has failed and httptools not yet, "
     "and httptools fails on the next byte",
     lambda c: c.ours[1] != "ok" and c.theirs[1] == "ok" and _theirs_fail_when_continued(c)),
]


class Case:
    def __init__(self, data, pieces, response, ours, theirs):
        self.data, self.pieces, self.response = data, pieces, response
        self.ours, self.theirs = ours, theirs

    def __repr__(self):
        kind = "response" if self.response else "request"
        return (f"{kind} {self.data!r} in {len(self.pieces)} piece(s) {[len(p) for p in self.pieces]}\n"
                f"  goloop:    {self.ours[1]!r} {self.ours[0]!r}\n"
                f"  httptools: {self.theirs[1]!r} {self.theirs[0]!r}")


def explain(case: Case):
    for name, _reason, pred in DIFFERENCES:
        if pred(case):
            return name
    return None


def differential(n: int, seed: int):
    """Runs n cases; returns (unexplained cases, counts of explained classes)."""
    rng = random.Random(seed)
    corpus = [(d, False) for d in REQUESTS] + [(d, True) for d in RESPONSES]
    bad, counts = [], {}
    for _ in range(n):
        base, response = rng.choice(corpus)
        data = mutate(rng, base) if rng.random() < 0.95 else base
        pieces = split(rng, data)
        ours = normalize(*run(gh, pieces, response))
        theirs = normalize(*run(ht, pieces, response))
        if ours == theirs:
            continue
        case = Case(data, pieces, response, ours, theirs)
        name = explain(case)
        if name is None:
            bad.append(case)
        else:
            counts[name] = counts.get(name, 0) + 1
    return bad, counts


def test_corpus_is_valid_and_equal():
    """The unmutated corpus: both accept it with the same events, whole and byte by byte."""
    for data, response in [(d, False) for d in REQUESTS] + [(d, True) for d in RESPONSES]:
        for pieces in ([data], [data[i:i + 1] for i in range(len(data))]):
            ours, theirs = run(gh, pieces, response), run(ht, pieces, response)
            if pieces is not None and len(pieces) > 1 and isinstance(ours[1], tuple):
                assert theirs[1][0] == ours[1][0]
                ours, theirs = ours[0], theirs[0]
            assert ours == theirs, data
            # every message reaches its body (the last response's ends only at EOF)
            assert "headers_complete" in {e[0] for e in (ours if isinstance(ours, list) else ours[0])}


def test_differential_fuzz():
    t0 = time.monotonic()
    bad, counts = differential(CASES, SEED)
    took = time.monotonic() - t0
    print(f"\n{CASES} cases in {took:.1f}s, allowed differences: {counts}")
    if bad:
        shown = "\n".join(repr(c) for c in bad[:15])
        pytest.fail(f"{len(bad)} of {CASES} cases differ from httptools outside DIFFERENCES:\n{shown}")


if __name__ == "__main__":  # python3 -P tests_py/test_http_differential.py [N] [SEED]
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else CASES
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    bad, counts = differential(n, seed)
    print(counts, len(bad))
    for c in bad:
        print(repr(c))

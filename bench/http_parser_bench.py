#!/usr/bin/env python3
"""HTTP parser microbenchmark: httptools vs goloop.http, feed_data with callbacks.

    python3 -P bench/http_parser_bench.py [--time 1.0] [--repeat 5] [--case NAME ...]

Each case feeds the same bytes over and over to one HttpRequestParser (a keep-alive
connection) whose protocol has the callbacks a server typically has (on_url, on_header
collecting the headers, on_headers_complete, on_body, on_message_complete). One op is one
feed_data call; for "pipelined16" one op carries 16 requests. The two parsers run
alternately, `--repeat` rounds of `--time` seconds each, and the best round counts.
Prints one JSON line per case: {"case", "httptools_ops", "goloop_ops", "ratio"} (ratio =
goloop_ops / httptools_ops, higher is better for goloop).
"""

import argparse
import json
import os
import sys
import time

SMALL_GET = b"GET / HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"  # what wrk sends

BROWSER_GET = (
    b"GET /static/css/site.min.css?v=20240611 HTTP/1.1\r\n"
    b"Host: www.example.com\r\n"
    b"Connection: keep-alive\r\n"
    b"sec-ch-ua: \"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"\r\n"
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    b"Chrome/124.0.0.0 Safari/537.36\r\n"
    b"Accept: text/css,*/*;q=0.1\r\n"
    b"Sec-Fetch-Site: same-origin\r\n"
    b"Sec-Fetch-Mode: no-cors\r\n"
    b"Sec-Fetch-Dest: style\r\n"
    b"Referer: https://www.example.com/articles/2024/06/some-article\r\n"
    b"Accept-Encoding: gzip, deflate, br, zstd\r\n"
    b"Accept-Language: en-US,en;q=0.9,fr;q=0.8\r\n"
    b"Cookie: session=8f14e45fceea167a5a36dedd4bea2543; theme=dark; _ga=GA1.2.1234567890.1700000000\r\n"
    b"\r\n"
)

POST_BODY = (
    b"POST /api/items HTTP/1.1\r\n"
    b"Host: api.example.com\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: 64\r\n"
    b"\r\n" + b'{"name": "widget", "price": 12.5, "tags": ["a", "b"], "n": 1234}'
)

CHUNKED_POST = (
    b"POST /upload HTTP/1.1\r\n"
    b"Host: api.example.com\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"\r\n"
    b"10\r\n0123456789abcdef\r\n"
    b"10\r\n0123456789abcdef\r\n"
    b"0\r\n\r\n"
)

CASES = {
    "small_get": SMALL_GET,
    "browser_get": BROWSER_GET,
    "pipelined16": SMALL_GET * 16,
    "post_body": POST_BODY,
    "chunked_post": CHUNKED_POST,
}


class ServerProtocol:
    """What an HTTP server's protocol does with the events (like uvicorn's, simplified)."""

    __slots__ = ("url", "headers", "body", "requests")

    def __init__(self):
        self.url = None
        self.headers = []
        self.body = []
        self.requests = 0

    def on_message_begin(self):
        self.headers = []
        self.body = []

    def on_url(self, url):
        self.url = url

    def on_header(self, name, value):
        self.headers.append((name, value))

    def on_headers_complete(self):
        pass

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        self.requests += 1


def measure(mod, data, seconds):
    proto = ServerProtocol()
    parser = mod.HttpRequestParser(proto)
    feed = parser.feed_data
    feed(data)  # warm up
    n = 0
    batch = 200
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(batch):
            feed(data)
        n += batch
        t = time.perf_counter()
        if t >= deadline:
            break
    return n / (t - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", type=float, default=1.0, help="seconds per round (default 1.0)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds per parser (default 5)")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="cases to run (default all)")
    args = ap.parse_args()

    try:
        import httptools
    except ImportError:
        sys.exit("httptools is not installed (pip install httptools)")
    from goloop import http as glhttp

    for name in args.case or list(CASES):
        data = CASES[name]
        best = {"httptools": 0.0, "goloop": 0.0}
        for _ in range(args.repeat):
            for key, mod in (("httptools", httptools), ("goloop", glhttp)):
                best[key] = max(best[key], measure(mod, data, args.time))
        print(json.dumps({
            "case": name,
            "httptools_ops": round(best["httptools"]),
            "goloop_ops": round(best["goloop"]),
            "ratio": round(best["goloop"] / best["httptools"], 3),
        }), flush=True)


if __name__ == "__main__":
    if os.path.isdir(os.path.join(os.getcwd(), "goloop", "binding")) and sys.flags.safe_path == 0:
        # Run from the repository root without -P: the Go folder goloop/ would shadow the package.
        sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.getcwd()]
    main()

"""The WSGI applications of bench/wsgi_bench.py (BENCHMARKS.md, "goloop serve: WSGI"):

- raw: a WSGI hello world, no framework;
- cpu: a CPU-bound handler (pure Python arithmetic, ~1 ms), for the free-threaded row;
- echo: the request's body read whole and sent back (bench/wsgi_ab.py --row echo; at /len
  its length is answered instead: --row upload);
- Flask's (wsgi_flask.py) and Django's (wsgi_django.py) apps are in modules of their own: a row
  imports only its framework."""
HELLO = b"Hello, World!"
_HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(HELLO)))]


def raw(environ, start_response):
    start_response("200 OK", _HEADERS)
    return [HELLO]


def _spin(n):
    # The modulus is made per call, not a constant: CPython 3.13t immortalizes the int
    # constants of code compiled in __main__ but not those of an imported module, so threads
    # sharing a constant 1000003 fight over its reference count (two threads running this
    # loop: 1.1x one thread with the constant, 2.0x with a per-call object; measured with
    # plain threading.Thread, no server).
    m = int("1000003")
    x = 0
    for i in range(n):
        x = (x * 31 + i) % m
    return x


def cpu(environ, start_response):
    body = str(_spin(int(environ.get("QUERY_STRING") or 20000))).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def echo(environ, start_response):
    body = environ["wsgi.input"].read()
    if environ["PATH_INFO"] == "/len":
        body = str(len(body)).encode()
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]

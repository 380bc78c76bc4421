"""The applications of bench/slow_readers.py and bench/soak.py (clients that do not read,
memory spikes, a mixed load):

- flask_big: Flask; GET /big answers one 10 MiB bytes object (the same object every time),
  anything else "ok";
- wsgi_gen: plain WSGI; /big is a generator of 64 KiB parts (10 MiB), /stats how many of
  them began and were closed ("began closed"), anything else "ok";
- asgi_app: ASGI; /big answers 10 MiB in one body (the same object), /stream 10 MiB in 64 KiB
  parts, POST /upload reads its body whole and answers its length, anything else "ok"; a
  WebSocket echoes what it receives;
- wsgi_hello: plain WSGI, "Hello, world!"."""
from flask import Flask

MiB = 1 << 20
BIG = b"x" * (10 * MiB)
PART = b"y" * 65536

flask_big = Flask("flask_big")


@flask_big.get("/big")
def big():
    return BIG


@flask_big.get("/")
def small():
    return "ok"


GEN = [0, 0]  # generators begun, closed (slow_readers.py's wsgi-gen: when every one was taken, freed)


def parts():
    GEN[0] += 1
    try:
        for _ in range(160):
            yield PART
    finally:
        GEN[1] += 1


def wsgi_gen(environ, start_response):
    if environ["PATH_INFO"] == "/big":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return parts()
    if environ["PATH_INFO"] == "/stats":
        body = b"%d %d" % tuple(GEN)
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


def wsgi_hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [b"Hello, world!"]


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return
            if msg.get("bytes") is not None:
                await send({"type": "websocket.send", "bytes": msg["bytes"]})
            else:
                await send({"type": "websocket.send", "text": msg.get("text") or ""})
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/upload":  # read the body whole, answer its length
        parts = []
        while True:
            msg = await receive()
            parts.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        n = len(b"".join(parts))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % n})
    elif path == "/big":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(BIG))]})
        await send({"type": "http.response.body", "body": BIG})
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(160):
            await send({"type": "http.response.body", "body": PART, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

"""The applications of bench/serve_bench.py (BENCHMARKS.md's goloop serve table), importable as serve_apps:NAME.

    hello      raw ASGI hello world ("Hello, world!", text/plain)
    big        raw ASGI, a 100 KiB response body
    upload     raw ASGI, a request body read to its end (receive() until more_body is false),
               its length answered
    starlette  Starlette, an async endpoint returning JSONResponse (GET /json)
    fastapi    FastAPI, GET /items/{item_id} with a path parameter and a Pydantic response model
    ws_echo    raw ASGI WebSocket: accepts, then sends back each message as it came (bytes or
               text) until the client disconnects (bench/ws_bench.py)
    busy       hello after blocking the loop BUSY_SECONDS (env, default 0.03) per request, as an
               application with CPU work does (bench/keepalive_busy_loop.py)
"""
import os
import time

BODY = b"Hello, world!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(BODY))]
BIG = b"x" * (100 * 1024)
BIG_HEADERS = [(b"content-type", b"application/octet-stream"), (b"content-length", b"%d" % len(BIG))]


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


async def big(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": BIG_HEADERS})
    await send({"type": "http.response.body", "body": BIG})


async def upload(scope, receive, send):
    if scope["type"] != "http":
        return
    n, more = 0, True
    while more:
        message = await receive()
        n += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"%d" % n
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def ws_echo(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            return
        if message.get("bytes") is not None:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
        else:
            await send({"type": "websocket.send", "text": message["text"]})


BUSY_SECONDS = float(os.environ.get("BUSY_SECONDS", "0.03"))


async def busy(scope, receive, send):
    if scope["type"] != "http":
        return
    time.sleep(BUSY_SECONDS)
    await hello(scope, receive, send)


def _starlette():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def json_endpoint(request):
        return JSONResponse({"message": "Hello, world!"})

    return Starlette(routes=[Route("/json", json_endpoint)])


def _fastapi():
    from fastapi import FastAPI
    from pydantic import BaseModel

    class Item(BaseModel):
        item_id: int
        name: str
        price: float

    api = FastAPI()

    @api.get("/items/{item_id}", response_model=Item)
    async def read_item(item_id: int) -> Item:
        return Item(item_id=item_id, name="widget", price=9.5)

    return api


def __getattr__(name):
    # Built on first access only, so a run of `hello` imports neither framework.
    if name in ("starlette", "fastapi"):
        app = globals()["_" + name]()
        globals()[name] = app
        return app
    raise AttributeError(name)

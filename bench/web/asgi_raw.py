"""TechEmpower's six test types as a raw ASGI app on asyncpg, orjson and jinja2 (no
framework). The pool is created by the lifespan startup when the server sends one, else on
the first request."""
from __future__ import annotations

import orjson

from tfb import (HELLO, apg_db, apg_fortunes, apg_pool, apg_queries, apg_updates, jinja_template,
                 queries_from_qs)

pool = None
template = jinja_template()
JSON_HEADERS = [(b"content-type", b"application/json")]
HTML_HEADERS = [(b"content-type", b"text/html; charset=utf-8")]
TEXT_HEADERS = [(b"content-type", b"text/plain")]


async def get_pool():
    global pool
    if pool is None:
        pool = await apg_pool()
    return pool


async def respond(send, headers, body, status=200):
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def json_(scope, p):
    return JSON_HEADERS, orjson.dumps({"message": HELLO})


async def db(scope, p):
    return JSON_HEADERS, orjson.dumps(await apg_db(p))


async def queries(scope, p):
    return JSON_HEADERS, orjson.dumps(await apg_queries(p, queries_from_qs(scope["query_string"])))


async def fortunes(scope, p):
    return HTML_HEADERS, template.render(fortunes=await apg_fortunes(p)).encode()


async def updates(scope, p):
    return JSON_HEADERS, orjson.dumps(await apg_updates(p, queries_from_qs(scope["query_string"])))


async def plaintext(scope, p):
    return TEXT_HEADERS, HELLO.encode()


ROUTES = {"/json": json_, "/db": db, "/queries": queries, "/fortunes": fortunes, "/updates": updates,
          "/plaintext": plaintext}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await get_pool()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if pool is not None:
                    await pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    handler = ROUTES.get(scope["path"])
    if handler is None:
        return await respond(send, TEXT_HEADERS, b"Not found", 404)
    headers, body = await handler(scope, pool or await get_pool())
    await respond(send, headers, body)

"""TechEmpower's six test types as a raw ASGI app on asyncpg, orjson and jinja2 (no
framework). The pool is created by the lifespan startup when the server sends one, else on
the first request."""
from __future__ import annotations

import random

import asyncpg
import orjson

from tfb import (FORTUNES_SQL, HELLO, POOL, READ_SQL, WRITE_SQL, dsn, jinja_template,
                 queries_from_qs, sorted_fortunes)

pool = None
template = jinja_template()
JSON_HEADERS = [(b"content-type", b"application/json")]
HTML_HEADERS = [(b"content-type", b"text/html; charset=utf-8")]
TEXT_HEADERS = [(b"content-type", b"text/plain")]


async def get_pool():
    global pool
    if pool is None:
        pool = await asyncpg.create_pool(dsn(), min_size=POOL, max_size=POOL)
    return pool


async def respond(send, headers, body, status=200):
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def json_(scope, p):
    return JSON_HEADERS, orjson.dumps({"message": HELLO})


async def db(scope, p):
    i = random.randint(1, 10000)
    async with p.acquire() as conn:
        n = await conn.fetchval(READ_SQL, i)
    return JSON_HEADERS, orjson.dumps({"id": i, "randomNumber": n})


async def queries(scope, p):
    ids = random.sample(range(1, 10001), queries_from_qs(scope["query_string"]))
    async with p.acquire() as conn:
        st = await conn.prepare(READ_SQL)
        worlds = [{"id": i, "randomNumber": await st.fetchval(i)} for i in ids]
    return JSON_HEADERS, orjson.dumps(worlds)


async def fortunes(scope, p):
    async with p.acquire() as conn:
        rows = await conn.fetch(FORTUNES_SQL)
    return HTML_HEADERS, template.render(fortunes=sorted_fortunes(rows)).encode()


async def updates(scope, p):
    ids = sorted(random.sample(range(1, 10001), queries_from_qs(scope["query_string"])))
    pairs = [(random.randint(1, 10000), i) for i in ids]
    async with p.acquire() as conn:
        st = await conn.prepare(READ_SQL)
        for i in ids:
            await st.fetchval(i)
        await conn.executemany(WRITE_SQL, pairs)
    return JSON_HEADERS, orjson.dumps([{"id": i, "randomNumber": n} for n, i in pairs])


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

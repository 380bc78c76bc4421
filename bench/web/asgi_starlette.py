"""TechEmpower's six test types on Starlette (asyncpg, orjson, jinja2)."""
from __future__ import annotations

import contextlib
import random

import asyncpg
import orjson
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from tfb import (FORTUNES_SQL, HELLO, POOL, READ_SQL, WRITE_SQL, clamp, dsn, jinja_template,
                 sorted_fortunes)

pool = None
template = jinja_template()


class ORJSONResponse(Response):
    media_type = "application/json"

    def render(self, content):
        return orjson.dumps(content)


async def get_pool():
    global pool
    if pool is None:
        pool = await asyncpg.create_pool(dsn(), min_size=POOL, max_size=POOL)
    return pool


async def json_(request):
    return ORJSONResponse({"message": HELLO})


async def db(request):
    i = random.randint(1, 10000)
    async with (pool or await get_pool()).acquire() as conn:
        n = await conn.fetchval(READ_SQL, i)
    return ORJSONResponse({"id": i, "randomNumber": n})


async def queries(request):
    ids = random.sample(range(1, 10001), clamp(request.query_params.get("queries")))
    async with (pool or await get_pool()).acquire() as conn:
        st = await conn.prepare(READ_SQL)
        worlds = [{"id": i, "randomNumber": await st.fetchval(i)} for i in ids]
    return ORJSONResponse(worlds)


async def fortunes(request):
    async with (pool or await get_pool()).acquire() as conn:
        rows = await conn.fetch(FORTUNES_SQL)
    return HTMLResponse(template.render(fortunes=sorted_fortunes(rows)))


async def updates(request):
    ids = sorted(random.sample(range(1, 10001), clamp(request.query_params.get("queries"))))
    pairs = [(random.randint(1, 10000), i) for i in ids]
    async with (pool or await get_pool()).acquire() as conn:
        st = await conn.prepare(READ_SQL)
        for i in ids:
            await st.fetchval(i)
        await conn.executemany(WRITE_SQL, pairs)
    return ORJSONResponse([{"id": i, "randomNumber": n} for n, i in pairs])


async def plaintext(request):
    return PlainTextResponse(HELLO)


@contextlib.asynccontextmanager
async def lifespan(app):
    await get_pool()
    yield
    if pool is not None:
        await pool.close()


app = Starlette(routes=[Route("/json", json_), Route("/db", db), Route("/queries", queries),
                        Route("/fortunes", fortunes), Route("/updates", updates),
                        Route("/plaintext", plaintext)], lifespan=lifespan)

"""TechEmpower's six test types on FastAPI (asyncpg, orjson, jinja2)."""
from __future__ import annotations

import contextlib
import random

import asyncpg
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, ORJSONResponse, PlainTextResponse

from tfb import (FORTUNES_SQL, HELLO, POOL, READ_SQL, WRITE_SQL, clamp, dsn, jinja_template,
                 sorted_fortunes)

pool = None
template = jinja_template()


async def get_pool():
    global pool
    if pool is None:
        pool = await asyncpg.create_pool(dsn(), min_size=POOL, max_size=POOL)
    return pool


@contextlib.asynccontextmanager
async def lifespan(app):
    await get_pool()
    yield
    if pool is not None:
        await pool.close()


app = FastAPI(lifespan=lifespan, default_response_class=ORJSONResponse, openapi_url=None)


@app.get("/json")
async def json_():
    return ORJSONResponse({"message": HELLO})


@app.get("/db")
async def db():
    i = random.randint(1, 10000)
    async with (pool or await get_pool()).acquire() as conn:
        n = await conn.fetchval(READ_SQL, i)
    return ORJSONResponse({"id": i, "randomNumber": n})


@app.get("/queries")
async def queries(queries: str | None = None):
    ids = random.sample(range(1, 10001), clamp(queries))
    async with (pool or await get_pool()).acquire() as conn:
        st = await conn.prepare(READ_SQL)
        worlds = [{"id": i, "randomNumber": await st.fetchval(i)} for i in ids]
    return ORJSONResponse(worlds)


@app.get("/fortunes")
async def fortunes():
    async with (pool or await get_pool()).acquire() as conn:
        rows = await conn.fetch(FORTUNES_SQL)
    return HTMLResponse(template.render(fortunes=sorted_fortunes(rows)))


@app.get("/updates")
async def updates(queries: str | None = None):
    ids = sorted(random.sample(range(1, 10001), clamp(queries)))
    pairs = [(random.randint(1, 10000), i) for i in ids]
    async with (pool or await get_pool()).acquire() as conn:
        st = await conn.prepare(READ_SQL)
        for i in ids:
            await st.fetchval(i)
        await conn.executemany(WRITE_SQL, pairs)
    return ORJSONResponse([{"id": i, "randomNumber": n} for n, i in pairs])


@app.get("/plaintext")
async def plaintext():
    return PlainTextResponse(HELLO)

"""TechEmpower's six test types on FastAPI (asyncpg, orjson, jinja2)."""
from __future__ import annotations

import contextlib

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, ORJSONResponse, PlainTextResponse

from tfb import HELLO, apg_db, apg_fortunes, apg_pool, apg_queries, apg_updates, clamp, jinja_template

pool = None
template = jinja_template()


async def get_pool():
    global pool
    if pool is None:
        pool = await apg_pool()
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
    return ORJSONResponse(await apg_db(pool or await get_pool()))


@app.get("/queries")
async def queries(queries: str | None = None):
    return ORJSONResponse(await apg_queries(pool or await get_pool(), clamp(queries)))


@app.get("/fortunes")
async def fortunes():
    return HTMLResponse(template.render(fortunes=await apg_fortunes(pool or await get_pool())))


@app.get("/updates")
async def updates(queries: str | None = None):
    return ORJSONResponse(await apg_updates(pool or await get_pool(), clamp(queries)))


@app.get("/plaintext")
async def plaintext():
    return PlainTextResponse(HELLO)

"""TechEmpower's six test types on FastAPI (asyncpg, orjson, jinja2)."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, ORJSONResponse, PlainTextResponse

from tfb import (HELLO, apg_db, apg_fortunes, apg_lifespan, apg_pool, apg_queries, apg_updates, clamp,
                 jinja_template)

template = jinja_template()


app = FastAPI(lifespan=apg_lifespan, default_response_class=ORJSONResponse, openapi_url=None)


@app.get("/json")
async def json_():
    return ORJSONResponse({"message": HELLO})


@app.get("/db")
async def db():
    return ORJSONResponse(await apg_db(await apg_pool()))


@app.get("/queries")
async def queries(queries: str | None = None):
    return ORJSONResponse(await apg_queries(await apg_pool(), clamp(queries)))


@app.get("/fortunes")
async def fortunes():
    return HTMLResponse(template.render(fortunes=await apg_fortunes(await apg_pool())))


@app.get("/updates")
async def updates(queries: str | None = None):
    return ORJSONResponse(await apg_updates(await apg_pool(), clamp(queries)))


@app.get("/plaintext")
async def plaintext():
    return PlainTextResponse(HELLO)

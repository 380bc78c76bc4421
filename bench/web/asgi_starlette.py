"""TechEmpower's six test types on Starlette (asyncpg, orjson, jinja2)."""
from __future__ import annotations

import orjson
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from tfb import (HELLO, apg_db, apg_fortunes, apg_lifespan, apg_pool, apg_queries, apg_updates, clamp,
                 jinja_template)

template = jinja_template()


class ORJSONResponse(Response):
    media_type = "application/json"

    def render(self, content):
        return orjson.dumps(content)


async def json_(request):
    return ORJSONResponse({"message": HELLO})


async def db(request):
    return ORJSONResponse(await apg_db(await apg_pool()))


async def queries(request):
    return ORJSONResponse(await apg_queries(await apg_pool(), clamp(request.query_params.get("queries"))))


async def fortunes(request):
    return HTMLResponse(template.render(fortunes=await apg_fortunes(await apg_pool())))


async def updates(request):
    return ORJSONResponse(await apg_updates(await apg_pool(), clamp(request.query_params.get("queries"))))


async def plaintext(request):
    return PlainTextResponse(HELLO)


app = Starlette(routes=[Route("/json", json_), Route("/db", db), Route("/queries", queries),
                        Route("/fortunes", fortunes), Route("/updates", updates),
                        Route("/plaintext", plaintext)], lifespan=apg_lifespan)

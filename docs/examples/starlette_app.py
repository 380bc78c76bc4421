# run: goloop serve starlette_app:app --workers 2
# check: GET /json -> 200 {"hello": "world"}
# needs: starlette
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route


async def hello(request):
    return JSONResponse({"hello": "world"})


app = Starlette(routes=[Route("/json", hello)])

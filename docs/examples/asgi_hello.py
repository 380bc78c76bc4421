# run: goloop serve asgi_hello:app
# check: GET / -> 200 "Hello, world"
async def app(scope, receive, send):
    if scope["type"] != "http":
        return  # lifespan: nothing to set up
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"Hello, world"})

# run: goloop serve trailers_app:app
# check: GET / -> 200 "body"
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    # trailers: announced in http.response.start, sent after the last body part; HTTP/1.1
    # sends them only to a client that asked with `TE: trailers`, HTTP/2 always
    wants = "http.response.trailers" in scope.get("extensions", {})
    await send({"type": "http.response.start", "status": 200, "trailers": wants,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"body", "more_body": False})
    if wants:
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"42")],
                    "more_trailers": False})

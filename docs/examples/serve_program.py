# run: python serve_program.py
# check: GET / -> 200 "Hello from a program"
import os

import goloop


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"Hello from a program"})


if __name__ == "__main__":
    # the same options as the command line's, by their Python names
    goloop.serve(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")), access_log=False)

# run: goloop serve metrics_app:app --metrics --metrics-path /metrics
# check: GET /stats -> 200 "requests"
# check: GET /metrics -> 200 "goloop_requests_total"
import json

import goloop


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = json.dumps(goloop.serve_metrics()).encode()  # the same counters as /metrics
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})

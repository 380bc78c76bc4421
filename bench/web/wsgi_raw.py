"""TechEmpower's six test types as a raw WSGI app on psycopg 3 (a psycopg_pool per
process), orjson and jinja2 (no framework)."""
from __future__ import annotations

import orjson

from tfb import (HELLO, jinja_template, pg_db, pg_fortunes, pg_queries, pg_updates, queries_from_qs,
                 wsgi_headers)

template = jinja_template()
JSON = [("Content-Type", "application/json")]
HTML = [("Content-Type", "text/html; charset=utf-8")]
TEXT = [("Content-Type", "text/plain")]


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/json":
        headers, body = JSON, orjson.dumps({"message": HELLO})
    elif path == "/plaintext":
        headers, body = TEXT, HELLO.encode()
    elif path == "/db":
        headers, body = JSON, orjson.dumps(pg_db())
    elif path == "/queries":
        headers, body = JSON, orjson.dumps(pg_queries(queries_from_qs(environ.get("QUERY_STRING", ""))))
    elif path == "/updates":
        headers, body = JSON, orjson.dumps(pg_updates(queries_from_qs(environ.get("QUERY_STRING", ""))))
    elif path == "/fortunes":
        headers, body = HTML, template.render(fortunes=pg_fortunes()).encode()
    else:
        start_response("404 Not Found", TEXT + [("Content-Length", "9")])
        return [b"Not found"]
    start_response("200 OK", headers + [("Content-Length", str(len(body)))])
    return [body]


app = wsgi_headers(app)

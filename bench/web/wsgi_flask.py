"""TechEmpower's six test types on Flask (psycopg 3 with a psycopg_pool per process,
orjson, Flask's jinja2)."""
from __future__ import annotations

import orjson
from flask import Flask, Response, request

from tfb import (FORTUNE_TEMPLATE, HELLO, clamp, pg_db, pg_fortunes, pg_queries, pg_updates,
                 wsgi_headers)

app = Flask(__name__)
# compiled once, in Flask's environment (render_template_string would compile it per request)
fortune_template = app.jinja_env.from_string(FORTUNE_TEMPLATE)


def json_response(obj):
    return Response(orjson.dumps(obj), mimetype="application/json")


@app.route("/json")
def json_():
    return json_response({"message": HELLO})


@app.route("/db")
def db():
    return json_response(pg_db())


@app.route("/queries")
def queries():
    return json_response(pg_queries(clamp(request.args.get("queries"))))


@app.route("/fortunes")
def fortunes():
    return fortune_template.render(fortunes=pg_fortunes())


@app.route("/updates")
def updates():
    return json_response(pg_updates(clamp(request.args.get("queries"))))


@app.route("/plaintext")
def plaintext():
    return Response(HELLO, mimetype="text/plain")


app = wsgi_headers(app)

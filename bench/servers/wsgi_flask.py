"""Flask's applications of bench/wsgi_bench.py:

- flask_hello: Flask's hello world;
- flask_db: a Flask endpoint reading one row of an SQLite table by id (the pattern of a
  database-backed page: one connection per server thread, one SELECT per request, JSON out).

The SQLite file is made at import (WSGI_BENCH_DB: its path; else a new temporary folder)."""
import os
import sqlite3
import tempfile
import threading

from flask import Flask, abort, jsonify

flask_hello = Flask("flask_hello")


@flask_hello.get("/")
def index():
    return "Hello, World!"


flask_db = Flask("flask_db")
DB = os.environ.get("WSGI_BENCH_DB") or os.path.join(tempfile.mkdtemp(prefix="wsgi-bench-"), "rows.db")
with sqlite3.connect(DB) as _c:
    _c.execute("CREATE TABLE IF NOT EXISTS item (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    _c.executemany("INSERT OR REPLACE INTO item VALUES (?, ?, ?)", [(i, f"item {i}", i * 1.25) for i in range(1, 1001)])
_c.close()
_local = threading.local()


def db():
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = sqlite3.connect(DB)
    return conn


@flask_db.get("/items/<int:item_id>")
def item(item_id):
    row = db().execute("SELECT id, name, price FROM item WHERE id = ?", (item_id,)).fetchone()
    if row is None:
        abort(404)
    return jsonify(id=row[0], name=row[1], price=row[2])

"""What every app of bench/web shares: TechEmpower's rules as small functions (the query
count, the fortunes' extra row and order, the template) and the database's address.

The apps read the database from PGHOST/PGPORT/PGUSER/PGPASSWORD/PGDATABASE (bench/web/pg.py
sets them) and their pool size from WEB_POOL (default 16 connections per process).
"""
from __future__ import annotations

import contextlib
import os
import threading
from urllib.parse import parse_qs

READ_SQL = 'SELECT "randomnumber", "id" FROM "world" WHERE id = $1'
WRITE_SQL = 'UPDATE "world" SET "randomnumber" = $1 WHERE id = $2'
FORTUNES_SQL = "SELECT id, message FROM fortune"
EXTRA_FORTUNE = "Additional fortune added at request time."
HELLO = "Hello, World!"
SERVER = "goloop-bench"  # the Server header apps add when their server does not

POOL = int(os.environ.get("WEB_POOL", "16"))

# TechEmpower's fortunes template (jinja2; Django's is the same page in its own syntax).
FORTUNE_TEMPLATE = (
    "<!DOCTYPE html>\n<html>\n<head><title>Fortunes</title></head>\n<body>\n<table>\n"
    "<tr><th>id</th><th>message</th></tr>\n"
    "{% for fortune in fortunes %}<tr><td>{{ fortune[0] }}</td><td>{{ fortune[1]|e }}</td></tr>\n"
    "{% endfor %}</table>\n</body>\n</html>\n"
)


def dsn() -> str:
    e = os.environ
    return (f"postgresql://{e.get('PGUSER', 'benchmarkdbuser')}:{e.get('PGPASSWORD', 'benchmarkdbpass')}"
            f"@{e.get('PGHOST', '127.0.0.1')}:{e.get('PGPORT', '5432')}/{e.get('PGDATABASE', 'hello_world')}")


def clamp(value) -> int:
    """TechEmpower's query count: an integer clamped to 1..500; missing or not an integer -> 1."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        return 1
    return 1 if n < 1 else 500 if n > 500 else n


def queries_from_qs(qs) -> int:
    """The `queries` parameter of a raw query string (str or bytes), clamped."""
    if isinstance(qs, bytes):
        qs = qs.decode("latin-1")
    vals = parse_qs(qs).get("queries")
    return clamp(vals[0] if vals else None)


def sorted_fortunes(rows) -> list:
    """rows (id, message) plus the fortune added at request time, sorted by message."""
    out = [tuple(r) for r in rows]
    out.append((0, EXTRA_FORTUNE))
    out.sort(key=lambda r: r[1])
    return out


def jinja_template():
    import jinja2
    return jinja2.Environment(autoescape=True).from_string(FORTUNE_TEMPLATE)


# ---------- psycopg (the WSGI apps) ----------

PG_READ_SQL = 'SELECT "randomnumber", "id" FROM "world" WHERE id = %s'
PG_WRITE_SQL = 'UPDATE "world" SET "randomnumber" = %s WHERE id = %s'
WSGI_POOL = int(os.environ.get("WEB_WSGI_POOL", "4"))
_pg_pool = None
_lock = threading.Lock()


def pg_pool():
    """This process's psycopg_pool.ConnectionPool, made on first use: after the server's
    fork, so no connection is shared between processes."""
    global _pg_pool
    if _pg_pool is None:
        from psycopg_pool import ConnectionPool
        with _lock:
            if _pg_pool is None:
                _pg_pool = ConnectionPool(dsn(), min_size=WSGI_POOL, max_size=WSGI_POOL, open=True)
                _pg_pool.wait()
    return _pg_pool


def pg_db():
    import random
    i = random.randint(1, 10000)
    with pg_pool().connection() as conn:
        n = conn.execute(PG_READ_SQL, (i,)).fetchone()[0]
    return {"id": i, "randomNumber": n}


def pg_queries(n):
    import random
    ids = random.sample(range(1, 10001), n)
    with pg_pool().connection() as conn:
        cur = conn.cursor()
        return [{"id": i, "randomNumber": cur.execute(PG_READ_SQL, (i,)).fetchone()[0]} for i in ids]


def pg_fortunes():
    with pg_pool().connection() as conn:
        return sorted_fortunes(conn.execute(FORTUNES_SQL).fetchall())


def pg_updates(n):
    import random
    ids = sorted(random.sample(range(1, 10001), n))
    pairs = [(random.randint(1, 10000), i) for i in ids]
    with pg_pool().connection() as conn:
        cur = conn.cursor()
        for i in ids:
            cur.execute(PG_READ_SQL, (i,)).fetchone()
        cur.executemany(PG_WRITE_SQL, pairs)
    return [{"id": i, "randomNumber": n} for n, i in pairs]


# ---------- headers for the WSGI servers that send none ----------

def wsgi_headers(app):
    """app unchanged, unless WEB_ADD_HEADERS is set (bench/web_bench.py sets it for bjoern and
    uWSGI, which send no Date, and bjoern no Server): then app with TechEmpower's required
    Server and Date headers added, and Content-Length where the app gives none (Django)."""
    if not os.environ.get("WEB_ADD_HEADERS"):
        return app
    import email.utils
    import time

    cache = [0, ""]

    def date():
        now = int(time.time())
        if now != cache[0]:
            cache[0], cache[1] = now, email.utils.formatdate(now, usegmt=True)
        return cache[1]

    def wrapped(environ, start_response):
        seen = {}

        def start(status, headers, exc_info=None):
            seen["status"], seen["headers"], seen["exc_info"] = status, headers, exc_info
            return lambda data: None  # the write() callable: unused by the apps here

        it = app(environ, start)
        try:
            body = b"".join(it)
        finally:
            if hasattr(it, "close"):
                it.close()
        headers = [h for h in seen["headers"] if h[0].lower() != "content-length"]
        headers += [("Server", SERVER), ("Date", date()), ("Content-Length", str(len(body)))]
        start_response(seen["status"], headers, seen["exc_info"])
        return [body]

    return wrapped


# ---------- asyncpg (the ASGI apps) ----------

_apg = None


async def apg_pool():
    """This process's asyncpg pool, made on first use (or by apg_lifespan's startup)."""
    global _apg
    if _apg is None:
        import asyncpg
        _apg = await asyncpg.create_pool(dsn(), min_size=POOL, max_size=POOL)
    return _apg


@contextlib.asynccontextmanager
async def apg_lifespan(app):
    """The frameworks' lifespan: the pool opened at startup, closed at shutdown."""
    global _apg
    await apg_pool()
    yield
    if _apg is not None:
        await _apg.close()
        _apg = None


async def apg_db(pool):
    import random
    i = random.randint(1, 10000)
    async with pool.acquire() as conn:
        return {"id": i, "randomNumber": await conn.fetchval(READ_SQL, i)}


async def apg_queries(pool, n):
    import random
    ids = random.sample(range(1, 10001), n)
    async with pool.acquire() as conn:
        st = await conn.prepare(READ_SQL)
        return [{"id": i, "randomNumber": await st.fetchval(i)} for i in ids]


async def apg_fortunes(pool):
    async with pool.acquire() as conn:
        return sorted_fortunes(await conn.fetch(FORTUNES_SQL))


async def apg_updates(pool, n):
    """n worlds read one by one, then written with new random numbers in one executemany
    (sorted ids: concurrent requests lock rows in the same order)."""
    import random
    ids = sorted(random.sample(range(1, 10001), n))
    pairs = [(random.randint(1, 10000), i) for i in ids]
    async with pool.acquire() as conn:
        st = await conn.prepare(READ_SQL)
        for i in ids:
            await st.fetchval(i)
        await conn.executemany(WRITE_SQL, pairs)
    return [{"id": i, "randomNumber": n} for n, i in pairs]

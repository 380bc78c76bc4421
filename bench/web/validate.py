"""Checks a running server against TechEmpower's rules for its six test types, as
TechEmpower's verifier does; bench/web_bench.py runs it before every measurement and stops
that server's cells when it fails.

    python3 bench/web/validate.py http://127.0.0.1:8000 --admin-dsn postgresql://postgres@127.0.0.1:PORT/hello_world

Checked: the `Server` and `Date` headers and the Content-Type of every answer; /json's
object; /db's world; /queries and /updates: a list of N worlds for N = 1, 20 and the
clamping (0, 501, "foo", "" and no parameter: 1, 500, 1, 1, 1), distinct ids, numbers in
1..10000; /updates: every returned number is in the table afterwards (the write was
committed); /fortunes: TechEmpower's page with the 12 rows and the one added at request
time, sorted by message, every message HTML-escaped; /plaintext's body. With --admin-dsn,
the queries the database executed (pg_stat_statements reset, R requests, its calls and rows
counted): /db >= R selects, /queries?queries=20 >= 20 R, /updates?queries=20 >= 20 R
selects and >= 20 R rows updated, /fortunes >= R selects of Fortune.
"""
from __future__ import annotations

import argparse
import email.utils
import html
import http.client
import json
import os
import re
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pg import FORTUNES  # noqa: E402
from tfb import EXTRA_FORTUNE, HELLO, sorted_fortunes  # noqa: E402

CLAMP_CASES = [("0", 1), ("501", 500), ("foo", 1), ("", 1), (None, 1), ("20", 20), ("1", 1)]


class Failed(Exception):
    pass


# ---------- pure checks (tests_py/test_web_validate.py) ----------

def check_headers(headers: dict, content_type: str) -> list:
    """headers: lower-cased names -> value. Problems with Server, Date and Content-Type."""
    out = []
    if not headers.get("server"):
        out.append("no Server header")
    date = headers.get("date")
    if not date:
        out.append("no Date header")
    elif email.utils.parsedate_tz(date) is None:
        out.append(f"Date header not an HTTP date: {date!r}")
    ct = headers.get("content-type", "")
    if not ct.lower().startswith(content_type):
        out.append(f"Content-Type {ct!r}, expected {content_type}")
    if "content-length" not in headers and headers.get("transfer-encoding", "").lower() != "chunked":
        out.append("neither Content-Length nor chunked")
    return out


def check_world(obj) -> list:
    if not isinstance(obj, dict):
        return [f"a world is not an object: {obj!r:.80}"]
    out = []
    for key in ("id", "randomNumber"):
        v = obj.get(key)
        if type(v) is not int or not 1 <= v <= 10000:
            out.append(f"world's {key} is {v!r}, expected an integer 1..10000")
    extra = set(obj) - {"id", "randomNumber"}
    if extra:
        out.append(f"world has extra keys {sorted(extra)}")
    return out


def check_worlds(obj, n: int) -> list:
    if not isinstance(obj, list):
        return [f"expected a list of {n} worlds, got {type(obj).__name__}"]
    if len(obj) != n:
        return [f"expected {n} worlds, got {len(obj)}"]
    out = []
    for w in obj:
        out += check_world(w)
    ids = [w.get("id") for w in obj if isinstance(w, dict)]
    if len(set(ids)) != len(ids):
        out.append("the same world id twice in one answer")
    return out


def check_json(obj) -> list:
    return [] if obj == {"message": HELLO} else [f"/json answered {obj!r:.80}, expected {{'message': {HELLO!r}}}"]


_ROW = re.compile(r"<tr><td>\s*(.*?)\s*</td><td>(.*?)</td></tr>", re.S)


def expected_fortunes() -> list:
    return sorted_fortunes(FORTUNES)


def check_fortunes(page: str, expected: list | None = None) -> list:
    """TechEmpower's fortunes page: title, table header, every row once, in order (the extra
    fortune included), every message escaped (no raw <, >, " or a bare &)."""
    expected = expected_fortunes() if expected is None else expected
    out = []
    flat = re.sub(r">\s+<", "><", page.strip())
    if not flat.lower().startswith("<!doctype html>"):
        out.append("the page does not start with <!DOCTYPE html>")
    for part in ("<title>Fortunes</title>", "<table>", "<tr><th>id</th><th>message</th></tr>", "</table>"):
        if part not in flat:
            out.append(f"the page lacks {part}")
    rows = _ROW.findall(flat)
    if len(rows) != len(expected):
        return out + [f"{len(rows)} fortune rows, expected {len(expected)}"]
    for (rid, cell), (eid, msg) in zip(rows, expected):
        if rid != str(eid):
            out.append(f"row id {rid!r} where {eid} ({msg[:30]!r}) was expected: not sorted by message?")
            continue
        if any(c in cell for c in '<>"') or re.search(r"&(?![a-zA-Z]+;|#\d+;|#x[0-9a-fA-F]+;)", cell):
            out.append(f"fortune {eid} not HTML-escaped: {cell[:60]!r}")
        elif html.unescape(cell) != msg:
            out.append(f"fortune {eid} reads {html.unescape(cell)[:60]!r}, expected {msg[:60]!r}")
    if EXTRA_FORTUNE not in (html.unescape(c) for _, c in rows):
        out.append("the fortune added at request time is missing")
    return out


# ---------- against a server ----------

class Client:
    def __init__(self, base):
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port or 80
        self.conn = None

    def get(self, path):
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self.conn.request("GET", path)
                r = self.conn.getresponse()
                body = r.read()
                if r.will_close:
                    self.conn.close()
                    self.conn = None
                return r.status, {k.lower(): v for k, v in r.getheaders()}, body
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise


def _json(path, body):
    try:
        return json.loads(body)
    except ValueError:
        raise Failed(f"{path}: not JSON: {body[:80]!r}") from None


def validate(base: str, admin_dsn: str | None = None, repeat: int = 10, tests=None) -> list:
    """Every problem found (an empty list: the server passes)."""
    c = Client(base)
    problems = []
    tests = set(tests or ("json", "db", "queries", "fortunes", "updates", "plaintext"))

    def get(path, ctype):
        status, headers, body = c.get(path)
        if status != 200:
            raise Failed(f"{path}: status {status}: {body[:120]!r}")
        problems.extend(f"{path}: {p}" for p in check_headers(headers, ctype))
        return body

    try:
        if "json" in tests:
            problems.extend(check_json(_json("/json", get("/json", "application/json"))))
        if "plaintext" in tests:
            body = get("/plaintext", "text/plain")
            if body != HELLO.encode():
                problems.append(f"/plaintext answered {body[:60]!r}")
        if "db" in tests:
            problems.extend("/db: " + p for p in check_world(_json("/db", get("/db", "application/json"))))
        for test in ("queries", "updates"):
            if test not in tests:
                continue
            for arg, n in CLAMP_CASES:
                path = f"/{test}" + ("" if arg is None else f"?queries={arg}")
                problems.extend(f"{path}: {p}" for p in check_worlds(_json(path, get(path, "application/json")), n))
        if "fortunes" in tests:
            page = get("/fortunes", "text/html").decode("utf-8", "replace")
            problems.extend("/fortunes: " + p for p in check_fortunes(page))
        if admin_dsn:
            problems.extend(count_queries(c, admin_dsn, repeat, tests))
    except Failed as exc:
        problems.append(str(exc))
    return fold(problems)


def fold(problems: list) -> list:
    """"/a: no Date header", "/b: no Date header" -> "no Date header (/a, /b)": one line per
    problem, in first-seen order."""
    where: dict = {}
    for p in problems:
        path, sep, what = p.partition(": ")
        if not sep or not path.startswith("/"):
            path, what = "", p
        where.setdefault(what, []).append(path)
    out = []
    for what, paths in where.items():
        paths = [p for p in paths if p]
        shown = ", ".join(paths[:3]) + (f" +{len(paths) - 3} more" if len(paths) > 3 else "")
        out.append(f"{what} ({shown})" if paths else what)
    return out


STATS_SQL = """
SELECT coalesce(sum(calls) FILTER (WHERE q LIKE 'select%%world%%'), 0),
       coalesce(sum(rows) FILTER (WHERE q LIKE 'select%%world%%'), 0),
       coalesce(sum(rows) FILTER (WHERE q LIKE 'update%%world%%'), 0),
       coalesce(sum(calls) FILTER (WHERE q LIKE 'select%%fortune%%'), 0)
FROM (SELECT lower(query) AS q, calls, rows FROM pg_stat_statements) s
"""


def count_queries(c: Client, admin_dsn: str, r: int, tests) -> list:
    """pg_stat_statements reset, r requests of each test, the executed queries counted."""
    import psycopg

    out = []
    with psycopg.connect(admin_dsn, autocommit=True) as db:
        def run(path):
            db.execute("SELECT pg_stat_statements_reset()")
            for _ in range(r):
                status, _, body = c.get(path)
                if status != 200:
                    raise Failed(f"{path}: status {status}")
            return db.execute(STATS_SQL).fetchone()

        if "db" in tests:
            sel, rows, _, _ = run("/db")
            if sel < r or rows < r:
                out.append(f"/db x{r}: {sel} selects of World returning {rows} rows, expected >= {r}")
        if "queries" in tests:
            sel, rows, _, _ = run("/queries?queries=20")
            if sel < 20 * r or rows < 20 * r:
                out.append(f"/queries?queries=20 x{r}: {sel} selects, {rows} rows, expected >= {20 * r}")
        if "updates" in tests:
            sel, _, upd, _ = run("/updates?queries=20")
            if sel < 20 * r:
                out.append(f"/updates?queries=20 x{r}: {sel} selects of World, expected >= {20 * r}")
            if upd < 20 * r:
                out.append(f"/updates?queries=20 x{r}: {upd} rows updated, expected >= {20 * r}")
            # the last answer's numbers are the table's now: the update was committed
            _, _, body = c.get("/updates?queries=20")
            worlds = json.loads(body)
            got = dict(db.execute("SELECT id, randomnumber FROM world WHERE id = ANY(%s)",
                                  ([w["id"] for w in worlds],)).fetchall())
            wrong = [w for w in worlds if got.get(w["id"]) != w["randomNumber"]]
            if wrong:
                out.append(f"/updates: {len(wrong)} of 20 answered numbers are not in the table afterwards")
        if "fortunes" in tests:
            _, _, _, f = run("/fortunes")
            if f < r:
                out.append(f"/fortunes x{r}: {f} selects of Fortune, expected >= {r}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--admin-dsn", help="a superuser's DSN: count executed queries (pg_stat_statements)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--tests", help="comma-separated subset of json,db,queries,fortunes,updates,plaintext")
    args = ap.parse_args()
    problems = validate(args.url, args.admin_dsn, args.repeat, args.tests.split(",") if args.tests else None)
    for p in problems:
        print("FAIL", p)
    if problems:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()

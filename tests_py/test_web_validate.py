"""bench/web/validate.py's pure checks (TechEmpower's rules) and bench/web/tfb.py's query
count: no server and no database (the benchmark itself runs them against live servers)."""
import html
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "web"))
import tfb  # noqa: E402
import validate  # noqa: E402


@pytest.mark.parametrize("value,expected", [
    ("20", 20), ("0", 1), ("-3", 1), ("501", 500), ("500", 500), ("foo", 1), ("", 1), (None, 1), ("2.5", 1),
])
def test_clamp(value, expected):
    assert tfb.clamp(value) == expected


@pytest.mark.parametrize("qs,expected", [
    (b"queries=7", 7), (b"", 1), (b"queries=", 1), (b"queries=9999", 500), ("x=1&queries=3", 3),
])
def test_queries_from_qs(qs, expected):
    assert tfb.queries_from_qs(qs) == expected


def page(rows, escape=html.escape):
    return tfb.jinja_template().render(fortunes=rows) if escape is html.escape else (
        "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>"
        "<tr><th>id</th><th>message</th></tr>"
        + "".join(f"<tr><td>{i}</td><td>{escape(m)}</td></tr>" for i, m in rows)
        + "</table></body></html>")


def test_fortunes_page_passes():
    assert validate.check_fortunes(page(validate.expected_fortunes())) == []


def test_fortunes_other_escaping_passes():
    # Django escapes ' as &#x27; and " as &quot;: the same text, another spelling
    esc = lambda m: m.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") \
        .replace("'", "&#x27;")  # noqa: E731
    assert validate.check_fortunes(page(validate.expected_fortunes(), esc)) == []


def test_fortunes_unescaped_fails():
    problems = validate.check_fortunes(page(validate.expected_fortunes(), lambda m: m))
    assert any("not HTML-escaped" in p for p in problems), problems


def test_fortunes_unsorted_fails():
    rows = sorted(validate.expected_fortunes())  # by id: not by message
    assert any("not sorted" in p for p in validate.check_fortunes(page(rows)))


def test_fortunes_without_extra_fails():
    rows = [r for r in validate.expected_fortunes() if r[0] != 0]
    assert validate.check_fortunes(page(rows))


def test_fortunes_sorted_by_code_point():
    rows = validate.expected_fortunes()
    assert rows[0] == (11, '<script>alert("This should not be displayed in a browser alert box.");</script>')
    assert rows[-1][0] == 12  # the Japanese one: the highest code points
    assert (0, tfb.EXTRA_FORTUNE) in rows and len(rows) == 13


def test_worlds():
    assert validate.check_worlds([{"id": 1, "randomNumber": 10000}], 1) == []
    assert validate.check_worlds([{"id": 1, "randomNumber": 0}], 1)
    assert validate.check_worlds([{"id": 1, "randomNumber": "5"}], 1)
    assert validate.check_worlds([{"id": 2, "randomNumber": 5}] * 2, 2)  # the same id twice
    assert validate.check_worlds({"id": 1, "randomNumber": 5}, 1)  # not a list
    assert validate.check_worlds([], 1)


def test_headers():
    ok = {"server": "x", "date": "Sat, 05 Dec 2026 15:00:00 GMT", "content-type": "application/json",
          "content-length": "27"}
    assert validate.check_headers(ok, "application/json") == []
    for drop in ("server", "date", "content-length"):
        assert validate.check_headers({k: v for k, v in ok.items() if k != drop}, "application/json")
    assert validate.check_headers(dict(ok, date="yesterday"), "application/json")
    assert validate.check_headers(ok, "text/html")


def test_json_and_fold():
    assert validate.check_json({"message": "Hello, World!"}) == []
    assert validate.check_json({"message": "Hello, world!"})
    assert validate.fold(["/a: no Date header", "/b: no Date header", "other"]) == \
        ["no Date header (/a, /b)", "other"]

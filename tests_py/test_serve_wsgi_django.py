"""A real Django project (tests_py/wsgi_apps/djsite, app notes), unchanged, under
`goloop serve --interface wsgi`: a view, the ORM on SQLite (a database in a temporary folder,
migrated at setup), a form with CSRF protection (token and cookie accepted, missing token 403),
a static file through WhiteNoise, the admin's login page, an error as a 500 with its traceback
in the server's log; through httpx and raw sockets, over HTTP/1.1 and HTTP/2 (h2c with prior
knowledge). One server per module. GOLOOP_WSGI_TEST_SERVER=gunicorn runs the same tests on
gunicorn (see wsgi_serving.py)."""
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("django")
pytest.importorskip("whitenoise")
httpx = pytest.importorskip("httpx")

from wsgi_serving import APPS_DIR, RawConn, need_h2, raw_request, wsgi_server  # noqa: E402

pytestmark = pytest.mark.timeout(120)

BOOM = "django-app-boom-51c9"  # notes.views.BOOM


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory(prefix="goloop-django-") as d:
        env = {"DJANGO_SETTINGS_MODULE": "djsite.settings", "DJANGO_TEST_DB": os.path.join(d, "db.sqlite3")}
        full_env = dict(os.environ, **env, PYTHONPATH=os.pathsep.join([APPS_DIR, os.environ.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"], cwd=APPS_DIR,
                       env=full_env, check=True, timeout=120)
        with wsgi_server("djsite.wsgi:application", env=env) as s:
            yield s


@pytest.fixture(scope="module", params=["http/1.1", "h2c"])
def client(request, server):
    if request.param == "h2c":
        need_h2(server)
    with httpx.Client(base_url=server.url, timeout=30, http1=request.param == "http/1.1",
                      http2=request.param == "h2c") as c:
        yield c


def test_hello_view(client):
    r = client.get("/")
    assert r.status_code == 200 and r.text == "Hello, Django!"
    assert r.headers["x-frame-options"] == "DENY"  # the middleware ran
    assert r.http_version in ("HTTP/1.1", "HTTP/2")


def csrf_form(client):
    r = client.get("/notes/new")
    assert r.status_code == 200 and "<form" in r.text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', r.text).group(1)
    assert client.cookies.get("csrftoken")
    return token


def test_form_with_csrf_and_orm(client):
    token = csrf_form(client)
    before = client.get("/notes/count").json()["count"]
    r = client.post("/notes/new", data={"csrfmiddlewaretoken": token, "title": "Ünïcode title",
                                        "body": "saved through the ORM"})
    assert r.status_code == 201, r.text
    note = r.json()
    assert note["title"] == "Ünïcode title"
    r = client.get(f"/notes/{note['id']}")
    assert r.json() == {"id": note["id"], "title": "Ünïcode title", "body": "saved through the ORM"}
    assert client.get("/notes/count").json()["count"] == before + 1
    assert client.get("/notes/999999").status_code == 404


def test_form_invalid_is_400(client):
    token = csrf_form(client)
    r = client.post("/notes/new", data={"csrfmiddlewaretoken": token, "title": ""})
    assert r.status_code == 400 and "title" in r.json()["errors"]


def test_post_without_csrf_token_is_403(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/notes/new", data={"title": "no token"})
        assert r.status_code == 403 and "CSRF" in r.text
        token = csrf_form(c)
        c.cookies.clear()  # the token without its cookie
        r = c.post("/notes/new", data={"csrfmiddlewaretoken": token, "title": "no cookie"})
        assert r.status_code == 403


def test_static_file_via_whitenoise(client):
    r = client.get("/static/notes/hello.txt")
    assert r.status_code == 200 and r.text == "notes static file served by WhiteNoise\n"
    assert r.headers["content-type"].startswith("text/plain")
    r = client.get("/static/admin/css/base.css")  # django.contrib.admin's own
    assert r.status_code == 200 and len(r.content) > 1000
    assert client.get("/static/nothing.css").status_code == 404


def test_admin_login_page(client):
    r = client.get("/admin/", follow_redirects=False)
    assert r.status_code == 302 and r.headers["location"].startswith("/admin/login/")
    r = client.get("/admin/login/?next=/admin/")
    assert r.status_code == 200
    assert 'name="username"' in r.text and 'name="password"' in r.text and "csrfmiddlewaretoken" in r.text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', r.text).group(1)
    r = client.post("/admin/login/?next=/admin/", data={"csrfmiddlewaretoken": token, "username": "nobody",
                                                        "password": "wrong", "next": "/admin/"})
    assert r.status_code == 200 and "Please enter the correct username and password" in r.text


def test_request_meta(client, server):
    r = client.get("/meta?x=1&y=%C3%A9")
    m = r.json()
    assert m["REQUEST_METHOD"] == "GET" and m["QUERY_STRING"] == "x=1&y=%C3%A9"
    assert m["PATH_INFO"] == "/meta" and m["path"] == "/meta" and m["full_path"] == "/meta?x=1&y=%C3%A9"
    assert m["REMOTE_ADDR"] == "127.0.0.1" and m["wsgi.url_scheme"] == "http" and m["secure"] is False
    assert m["uri"] == f"http://127.0.0.1:{server.port}/meta?x=1&y=%C3%A9"
    assert m["SERVER_PROTOCOL"] == r.http_version


def test_error_is_500_with_traceback_in_log(client, server):
    r = client.get("/boom")
    assert r.status_code == 500 and BOOM not in r.text
    log = server.log()
    assert "Traceback (most recent call last)" in log and f"RuntimeError: {BOOM}" in log
    assert client.get("/").status_code == 200


def test_raw_socket_csrf_round_trip(server):
    """The CSRF form by hand over one keep-alive connection: GET the form, POST with the cookie
    and the token, then the same POST without the cookie."""
    with RawConn(server.port) as c:
        c.send(raw_request("GET", "/notes/new"))
        st, h, body, _ = c.response()
        assert st == 200
        cookie = re.search(r"csrftoken=([^;]+)", h["set-cookie"]).group(1)
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', body).group(1).decode()
        form = f"csrfmiddlewaretoken={token}&title=raw&body=socket".encode()
        ctype = {"Content-Type": "application/x-www-form-urlencoded"}
        c.send(raw_request("POST", "/notes/new", {**ctype, "Cookie": f"csrftoken={cookie}"}, form))
        st, h, body, _ = c.response()
        assert st == 201 and json.loads(body)["title"] == "raw"
        c.send(raw_request("POST", "/notes/new", ctype, form))
        st, h, body, _ = c.response()
        assert st == 403

"""TechEmpower's six test types on Django's ORM and templates (psycopg 3 backend, one
persistent connection per thread); the minimal settings are configured here."""
from __future__ import annotations

import os
import random

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-only",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[],
    MIDDLEWARE=[],
    USE_TZ=False,
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("PGDATABASE", "hello_world"),
        "USER": os.environ.get("PGUSER", "benchmarkdbuser"),
        "PASSWORD": os.environ.get("PGPASSWORD", "benchmarkdbpass"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        "CONN_MAX_AGE": None,
    }},
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "OPTIONS": {}}],
)
django.setup()

from django.db import models, transaction  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.template import engines  # noqa: E402
from django.urls import path  # noqa: E402

import orjson  # noqa: E402

from tfb import HELLO, clamp, sorted_fortunes, wsgi_headers  # noqa: E402


class World(models.Model):
    randomnumber = models.IntegerField()

    class Meta:
        app_label = "tfb"
        db_table = "world"
        managed = False


class Fortune(models.Model):
    message = models.CharField(max_length=2048)

    class Meta:
        app_label = "tfb"
        db_table = "fortune"
        managed = False


template = engines["django"].from_string(
    "<!DOCTYPE html>\n<html>\n<head><title>Fortunes</title></head>\n<body>\n<table>\n"
    "<tr><th>id</th><th>message</th></tr>\n"
    "{% for f in fortunes %}<tr><td>{{ f.0 }}</td><td>{{ f.1 }}</td></tr>\n"
    "{% endfor %}</table>\n</body>\n</html>\n")


def json_response(obj):
    return HttpResponse(orjson.dumps(obj), content_type="application/json")


def json_(request):
    return json_response({"message": HELLO})


def db(request):
    w = World.objects.get(id=random.randint(1, 10000))
    return json_response({"id": w.id, "randomNumber": w.randomnumber})


def queries(request):
    ids = random.sample(range(1, 10001), clamp(request.GET.get("queries")))
    return json_response([{"id": w.id, "randomNumber": w.randomnumber}
                          for w in (World.objects.get(id=i) for i in ids)])


def fortunes(request):
    rows = sorted_fortunes(Fortune.objects.values_list("id", "message"))
    return HttpResponse(template.render({"fortunes": rows}), content_type="text/html; charset=utf-8")


def updates(request):
    ids = sorted(random.sample(range(1, 10001), clamp(request.GET.get("queries"))))
    worlds = [World.objects.get(id=i) for i in ids]
    for w in worlds:
        w.randomnumber = random.randint(1, 10000)
    with transaction.atomic():
        World.objects.bulk_update(worlds, ["randomnumber"])
    return json_response([{"id": w.id, "randomNumber": w.randomnumber} for w in worlds])


def plaintext(request):
    return HttpResponse(HELLO, content_type="text/plain")


urlpatterns = [path("json", json_), path("db", db), path("queries", queries), path("fortunes", fortunes),
               path("updates", updates), path("plaintext", plaintext)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

app = get_wsgi_application()


app = wsgi_headers(app)

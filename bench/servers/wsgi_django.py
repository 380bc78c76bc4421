"""Django's hello world for bench/wsgi_bench.py: one view returning HttpResponse("Hello, World!"),
behind the middleware `django-admin startproject` sets up (security, sessions, common, CSRF,
auth, messages, clickjacking), DEBUG off; no database query on this path."""
import django
from django.conf import settings
from django.http import HttpResponse
from django.urls import path

settings.configure(
    DEBUG=False, SECRET_KEY="bench-not-secret", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                    "django.contrib.messages"],
    MIDDLEWARE=["django.middleware.security.SecurityMiddleware",
                "django.contrib.sessions.middleware.SessionMiddleware",
                "django.middleware.common.CommonMiddleware",
                "django.middleware.csrf.CsrfViewMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
                "django.contrib.messages.middleware.MessageMiddleware",
                "django.middleware.clickjacking.XFrameOptionsMiddleware"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()


def hello(request):
    return HttpResponse("Hello, World!")


urlpatterns = [path("", hello)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()

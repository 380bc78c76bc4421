"""A Django project's settings as `django-admin startproject` writes them, plus WhiteNoise for
static files and the notes app. The SQLite database lives where DJANGO_TEST_DB says (the test
fixture's temporary folder, migrated at setup)."""
import os

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET_KEY = "goloop-tests-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "notes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "djsite.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
WSGI_APPLICATION = "djsite.wsgi.application"

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ.get("DJANGO_TEST_DB", os.path.join(BASE_DIR, "db.sqlite3")),
                         # a throwaway test database: no fsync per migration (seconds on a busy disk)
                         "OPTIONS": {"init_command": "PRAGMA synchronous=OFF; PRAGMA journal_mode=MEMORY"}}}
# the admin login test posts a wrong password: a fast hasher keeps it quick (tests only)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "static/"
# no collectstatic step: WhiteNoise serves the apps' static folders as the finders see them
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = False
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"stderr": {"class": "logging.StreamHandler"}},
           "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}}}

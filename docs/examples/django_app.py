# run: goloop serve --interface wsgi django_app:application
# check: GET /hello/goloop -> 200 "Hello, goloop"
# needs: django
# A Django project in one file; a real project points goloop serve at its wsgi.py:
#     goloop serve --interface wsgi mysite.wsgi:application
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.http import HttpResponse
from django.urls import path

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="an example, not a secret",
)


def hello(request, name):
    return HttpResponse(f"Hello, {name}")


urlpatterns = [path("hello/<str:name>", hello)]
application = get_wsgi_application()

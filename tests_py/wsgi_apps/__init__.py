"""Real WSGI applications served unchanged by the WSGI suites (test_serve_wsgi_flask.py,
test_serve_wsgi_django.py): a Flask app (flask_app.py) and a Django project (djsite/, app notes/)."""

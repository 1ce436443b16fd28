"""The app of the Python rows of test/bench/template: build() imports
Django (its settings configured, its apps set up) and loads 100,000 rows,
what a back-office app does before it serves anyone; application answers
how many rows the process holds."""
import json
import os

ROWS = []


def build():
    import django
    from django.conf import settings
    if not settings.configured:
        settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"],
                           DATABASES={}, USE_TZ=True)
    django.setup()
    import django.contrib.admin  # noqa: F401 (what an admin site imports)
    import django.forms  # noqa: F401
    ROWS.extend({"id": i, "name": "customer %d" % i, "city": "city-%d" % (i % 977), "balance": i * 7 % 10_000}
                for i in range(100_000))


def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"rows": len(ROWS), "pid": os.getpid()}).encode()]

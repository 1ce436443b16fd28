"""WSGI config for site_project: `site_project.wsgi:application` is what a
stickyd python3 group runs."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_project.settings")

application = get_wsgi_application()

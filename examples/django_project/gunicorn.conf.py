"""The shop and its job workers in one gunicorn: ``gunicorn -c gunicorn.conf.py``."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

from echomq_gevent.contrib.django.gunicorn import install  # noqa: E402

wsgi_app = "shop.wsgi:application"
bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
install(globals())

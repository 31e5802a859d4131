"""Settings of the example shop: one app, SQLite, echomq-gevent for background jobs."""
import os

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "shop",
    "echomq_gevent.contrib.django",
]

DB_FILE = os.environ.get("SHOP_DB", os.path.join(BASE_DIR, "var", "shop.sqlite3"))
os.makedirs(os.path.dirname(DB_FILE), exist_ok=True)

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DB_FILE,
    }
}

# Background jobs: the queues live here, beside the rest of the settings.
ECHOMQ = {
    "redis": os.environ.get("REDIS_URL", "embedded"),
    "prefix": os.environ.get("ECHOMQ_PREFIX", "bull"),
    "queues": {
        "orders": {"concurrency": 5, "shutdown_timeout": 10},
    },
    # SHOP_OUTBOX=1: jobs go through the transactional outbox (written with the order,
    # in its transaction; the worker's relay adds them to Redis).
    "outbox": os.environ.get("SHOP_OUTBOX") == "1",
}

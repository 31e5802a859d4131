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


def _tasks_framework():
    """Django's Tasks framework: built in from Django 6.0, the django-tasks backport on
    4.2 to 5.2 (None on older Django: the shop then enqueues with enqueue_on_commit)."""
    import django

    if django.VERSION >= (6, 0):
        return "django.tasks"
    if django.VERSION >= (4, 2):
        from importlib.util import find_spec

        # found, not imported: the backport's import loads Django's admin, whose lazy default
        # site gevent's patching (gunicorn's worker, after the fork) would then set up
        return "django_tasks" if find_spec("django_tasks") else None
    return None


TASKS_FRAMEWORK = _tasks_framework()
if TASKS_FRAMEWORK == "django_tasks":
    INSTALLED_APPS.append("django_tasks")

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

if TASKS_FRAMEWORK:
    # @task functions (shop/tasks.py) run by `manage.py echomq_worker` on the queues above.
    TASKS = {
        "default": {
            "BACKEND": "echomq_gevent.contrib.django.tasks.EchoMQBackend",
            "QUEUES": ["orders"],
            "OPTIONS": {
                # an enqueue() inside transaction.atomic() goes out once it commits (with the
                # outbox on, it is a row of the transaction itself)
                "enqueue_on_commit": True,
                "job_options": {"attempts": 3, "backoff": {"type": "exponential", "delay": 1000}},
            },
        }
    }

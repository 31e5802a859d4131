"""gunicorn settings for the example app with its job workers in the same processes.

    REDIS_URL=redis://127.0.0.1:6379/0 gunicorn -c conf/gunicorn.conf.py

Every worker process serves HTTP and runs the queues of the YAML file on one gevent
hub. Define your own hooks above the install() line: install() chains them.
"""
import os

from echomq_gevent.contrib.gunicorn import install

bind = os.environ.get("BIND", "127.0.0.1:8000")
worker_class = "gevent"          # required: job greenlets share the gevent hub
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_connections = 1000        # request greenlets per worker process
wsgi_app = "examples.app:application"

# Time budgets (docs/gunicorn.md): on deploy, in-flight jobs get
# min(graceful_timeout, timeout) minus a margin to finish, then go back to wait.
graceful_timeout = 30
timeout = 30
keepalive = 5
max_requests = int(os.environ.get("MAX_REQUESTS", "0"))
max_requests_jitter = max_requests // 10

# dashboard=True: a read-only dashboard at /_echomq/ui/ (docs/dashboard.md); pass
# {"actions": True, "auth": check} to enable actions behind your own auth check
install(globals(), config=os.environ.get("ECHOMQ_CONFIG", "examples/worker.yaml"), dashboard=True)

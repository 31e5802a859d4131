"""Django settings of the ledger's worker processes (``ledger_worker_proc.py``), read from
the environment so the children of ``offload: process`` set Django up the same way:
``LEDGER_DATABASE`` (``DATABASES['default']`` as JSON), ``LEDGER_REDIS``,
``LEDGER_PREFIX``, ``LEDGER_QUEUE`` and ``LEDGER_QUEUE_OPTIONS`` (JSON)."""
import json
import os

SECRET_KEY = "ledger-tests-only"
USE_TZ = True
INSTALLED_APPS = ["echomq_gevent.contrib.django"]
DATABASES = {"default": json.loads(os.environ["LEDGER_DATABASE"])}
ECHOMQ = {"redis": os.environ["LEDGER_REDIS"], "prefix": os.environ["LEDGER_PREFIX"], "entry_points": False,
          "queues": {os.environ["LEDGER_QUEUE"]: json.loads(os.environ.get("LEDGER_QUEUE_OPTIONS") or "{}")}}

"""The Django tests' settings.ECHOMQ for one test (imported by the test modules)."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def django_echomq_settings(redis_url, prefix, queues):
    """``settings.ECHOMQ`` pointing at the test's Redis and prefix with ``queues`` (each
    with short test timings) while the block runs; yields the Django integration, reset
    on the way in and out."""
    from django.conf import settings

    from echomq_gevent.contrib import django as integration

    saved = settings.ECHOMQ
    settings.ECHOMQ = {"redis": redis_url, "prefix": prefix, "entry_points": False,
                       "queues": {q: {"concurrency": 1, "drain_delay": 0.5, "shutdown_timeout": 5} for q in queues}}
    integration.reset()
    try:
        yield integration
    finally:
        settings.ECHOMQ = saved
        integration.reset()

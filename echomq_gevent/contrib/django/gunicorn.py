"""Run the job workers of ``settings.ECHOMQ`` inside gunicorn's gevent workers.

::

    # gunicorn.conf.py
    import os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

    from echomq_gevent.contrib.django.gunicorn import install

    wsgi_app = "mysite.wsgi:application"
    install(globals())

In the gunicorn master it reads and validates ``settings.ECHOMQ`` (a wrong setting stops
gunicorn before it forks, naming the setting) without setting Django up: the master must
not import ``django.db``, whose connection storage would then be a real thread-local
that every greenlet of a forked gevent worker shares. The configuration goes to
:func:`echomq_gevent.contrib.gunicorn.install`, which does the rest as for a YAML file;
in each worker process, when the job workers start (the app is loaded and gevent has
patched the process by then), the apps' ``jobs`` modules are imported and their
processors registered (and the tasks of ``settings.TASKS``, see ``tasks.py``), and every job gets the database hygiene of ``manage.py
echomq_worker``. Keyword arguments are passed on (``drain_margin``, ``metrics``, ...).
"""
from __future__ import annotations

from typing import Any, Callable, MutableMapping, Optional

from ...plugins.hookspecs import hookimpl

__all__ = ["install"]


class _DiscoverInWorker:
    """Plugin: when the worker process builds its plugin host, set Django up (if the
    app has not), import the apps' ``jobs`` modules and register the declared
    processors; with an ``EchoMQBackend`` in ``settings.TASKS``, import the apps' task
    modules too and run their jobs (``task_worker.TaskProcessors``)."""

    __name__ = "echomq_gevent.contrib.django.discover"

    def __init__(self) -> None:
        self._tasks: Optional[Any] = None

    @hookimpl
    def echomq_register_processors(self, registry: Any) -> None:
        import django

        from . import discover_modules, integration, processor
        from .task_worker import worker_plugins

        django.setup()
        discover_modules()
        for queue, job_name, fn in processor.routes():
            registry.add(queue, job_name, fn)
        tasks = worker_plugins(list(integration().cfg.queues))
        self._tasks = tasks[0] if tasks else None

    @hookimpl
    def echomq_get_processor(self, queue: str, job_name: str) -> Optional[Callable[..., Any]]:
        return self._tasks.echomq_get_processor(queue, job_name) if self._tasks is not None else None


def install(namespace: MutableMapping[str, Any], **options: Any) -> Any:
    from .. import gunicorn
    from . import DjangoJobContext, integration, reset

    reset()
    state = integration()  # reads django.conf.settings only
    extra = (DjangoJobContext(), _DiscoverInWorker()) + tuple(options.pop("extra_plugins", ()))
    return gunicorn.install(namespace, config=state.cfg, extra_plugins=extra, **options)

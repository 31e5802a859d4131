"""The Django app of the integration (``"echomq_gevent.contrib.django"`` in INSTALLED_APPS)."""
from __future__ import annotations

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

from ...errors import ConfigError


class EchoMQConfig(AppConfig):
    name = "echomq_gevent.contrib.django"
    label = "echomq_gevent"
    verbose_name = "echomq-gevent"

    def ready(self) -> None:
        """Check ``settings.ECHOMQ`` when Django starts, so a wrong setting stops every
        command (and the web app) with an error naming it."""
        from django.core.signals import setting_changed

        from . import integration, reset
        from .task_worker import aliases

        # override_settings(ECHOMQ=...) in a test: read the new settings on next use
        setting_changed.connect(_setting_changed, dispatch_uid="echomq_gevent.setting_changed")
        reset()
        try:
            integration()
        except ConfigError as exc:
            raise ImproperlyConfigured(str(exc)) from None
        if aliases():
            # settings.TASKS names EchoMQBackend: load Django's Tasks API now, so its system
            # checks (each backend's check(): queues ECHOMQ lacks) run with `manage.py check`
            # even before any task module is imported
            try:
                from . import task_api  # noqa: F401
            except ImportError as exc:
                raise ImproperlyConfigured(f"settings.TASKS names {aliases()[0]!r} with EchoMQBackend: {exc}") \
                    from None


def _setting_changed(*, setting: str, **kwargs: object) -> None:
    if setting == "ECHOMQ":
        from . import reset

        reset()

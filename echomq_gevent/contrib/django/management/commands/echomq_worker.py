"""``python manage.py echomq_worker``: run the job workers of ``settings.ECHOMQ``."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from echomq_gevent.errors import ConfigError


class Command(BaseCommand):
    help = ("Run the echomq-gevent job workers of settings.ECHOMQ in this process (every queue, or "
            "those named with --queue). SIGTERM/SIGINT drains: in-flight jobs finish or are handed "
            "back to wait; a second signal hands them back at once.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--queue", "-Q", action="append", default=[], dest="queues",
                            help="run only this queue (repeat for more)")
        parser.add_argument("--check", action="store_true",
                            help="validate the settings, import the processors, ping Redis; then exit")
        parser.add_argument("--log-level", choices=["debug", "info", "warning", "error", "critical"])

    def handle(self, *args: Any, **options: Any) -> None:
        from echomq_gevent.contrib import django as integration

        try:
            code = integration.integration().run_worker(
                options["queues"], check=options["check"], log_level=options["log_level"],
                plugins=integration.worker_plugins())
        except ConfigError as exc:
            raise CommandError(f"configuration error: {exc}", returncode=2) from None
        if code:
            raise CommandError(f"the workers stopped with exit code {code}", returncode=code)

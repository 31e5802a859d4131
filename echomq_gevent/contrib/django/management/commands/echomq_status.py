"""``python manage.py echomq_status``: job counts of the queues of ``settings.ECHOMQ``."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from echomq_gevent.errors import ConfigError


class Command(BaseCommand):
    help = "Job counts per queue of settings.ECHOMQ (or those named) and the workers seen."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("queues", nargs="*", help="queue names (default: every declared queue)")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        from echomq_gevent.contrib import django as integration

        try:
            integration.integration().print_status(options["queues"], as_json=options["json"])
        except ConfigError as exc:
            raise CommandError(f"configuration error: {exc}", returncode=2) from None

"""``python manage.py echomq_outbox list|retry|delete``: the outbox's parked rows."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from echomq_gevent.errors import ConfigError


class Command(BaseCommand):
    help = ("The outbox of settings.ECHOMQ['outbox']: 'list' its numbers and parked rows, 'retry' parked rows "
            "(ids, or --all), 'delete' parked rows for good (ids).")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action", choices=["list", "retry", "delete"])
        parser.add_argument("ids", nargs="*", help="outbox row ids (retry, delete)")
        parser.add_argument("--all", action="store_true", dest="all_rows", help="retry: every parked row")
        parser.add_argument("--json", action="store_true", help="list: print JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        from echomq_gevent.contrib import django as integration
        from echomq_gevent.contrib.outbox.commands import parse_ids, run_outbox_command

        try:
            box = integration.outbox()
            ids = parse_ids(options["ids"])
        except (ConfigError, ValueError) as exc:
            raise CommandError(str(exc), returncode=2) from None
        code = run_outbox_command(box, options["action"], ids, options["all_rows"], options["json"])
        if code:
            raise CommandError(f"echomq_outbox {options['action']} failed", returncode=code)

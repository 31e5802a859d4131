"""``python manage.py echomq_cancel QUEUE JOB_ID [--reason TEXT]``: stop a job of a queue
of ``settings.ECHOMQ`` wherever it is (``Queue.cancel_job``)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from echomq_gevent.errors import ConfigError


class Command(BaseCommand):
    help = ("Cancel a job: a waiting one fails now and never runs; a running one is stopped by the "
            "worker running it and fails. Prints what happened.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("queue", help="a queue declared in settings.ECHOMQ")
        parser.add_argument("job_id")
        parser.add_argument("--reason", help="why (at most 1,000 characters)")

    def handle(self, *args: Any, **options: Any) -> None:
        from echomq_gevent.contrib import django as integration

        try:
            out = integration.queue(options["queue"]).cancel_job(options["job_id"], options["reason"])
        except ConfigError as exc:
            raise CommandError(f"configuration error: {exc}", returncode=2) from None
        except ValueError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if out.outcome in ("missing", "unknown"):
            raise CommandError(out.describe(), returncode=2)
        self.stdout.write(out.describe())

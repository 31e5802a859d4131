"""``python manage.py echomq_worker``: run the job workers of ``settings.ECHOMQ``."""
from __future__ import annotations

import os
import sys
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
        from gevent import monkey

        from echomq_gevent.contrib import django as integration

        if not monkey.is_module_patched("socket"):
            # Django made its connection thread-local before gevent patched anything, so
            # every job greenlet would share one connection: start again, patched first.
            if len(sys.argv) > 1 and sys.argv[1] == "echomq_worker" and os.path.exists(sys.argv[0]):
                self.stderr.write("echomq_worker: restarting with gevent patched before Django loads "
                                  "(add 'from gevent import monkey; monkey.patch_all()' at the top of "
                                  "manage.py to skip this)")
                from echomq_gevent.contrib.patched import restart_patched

                restart_patched(sys.argv)
            raise CommandError("echomq_worker needs gevent to patch the process before Django is imported: "
                               "add 'from gevent import monkey; monkey.patch_all()' at the top of manage.py",
                               returncode=2)

        try:
            code = integration.integration().run_worker(
                options["queues"], check=options["check"], log_level=options["log_level"],
                plugins=integration.worker_plugins())
        except ConfigError as exc:
            raise CommandError(f"configuration error: {exc}", returncode=2) from None
        if code:
            raise CommandError(f"the workers stopped with exit code {code}", returncode=code)

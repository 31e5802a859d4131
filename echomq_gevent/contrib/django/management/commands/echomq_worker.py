"""``python manage.py echomq_worker``: run the job workers of ``settings.ECHOMQ``."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, List

from django.core.management.base import BaseCommand, CommandError

from echomq_gevent.errors import ConfigError


def _processes(value: str) -> int:
    from echomq_gevent.host.config import parse_processes

    try:
        return parse_processes(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _child_argv(index: int) -> List[str]:
    """A supervised child: this command line again (``manage.py echomq_worker ...``),
    patched for gevent before Django loads."""
    from echomq_gevent.host.cli import child_command_line

    return [sys.executable, "-m", "echomq_gevent.contrib.patched", *child_command_line(sys.argv, index)]


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
        parser.add_argument("--processes", type=_processes, metavar="N",
                            help="run N supervised worker processes (auto: the CPU count); overrides "
                                 "ECHOMQ['processes']")
        parser.add_argument("--supervised-child", type=int, help=argparse.SUPPRESS)

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
                plugins=integration.worker_plugins(), processes=options["processes"],
                supervised_child=options["supervised_child"], child_argv=_child_argv)
        except ConfigError as exc:
            raise CommandError(f"configuration error: {exc}", returncode=2) from None
        if code:
            raise CommandError(f"the workers stopped with exit code {code}", returncode=code)

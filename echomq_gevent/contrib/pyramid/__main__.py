"""``python -m echomq_gevent.contrib.pyramid INI [status]``: the job workers of a Pyramid app.

Loads the app from the ``.ini`` file (``pyramid.paster.bootstrap``, as ``pshell``
does), then runs the workers of its ``echomq.*`` settings with the command's runner
(SIGTERM/SIGINT drains), or prints their status.
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import sys  # noqa: E402
from typing import List, Optional  # noqa: E402


def _processes(value: str) -> int:
    from ...host.config import parse_processes

    try:
        return parse_processes(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m echomq_gevent.contrib.pyramid",
                                description="Run (or show the status of) the job workers of a Pyramid app; "
                                            "'outbox list|retry|delete' for its outbox's parked rows.")
    p.add_argument("config_uri", help="the app's .ini file, e.g. development.ini (or development.ini#main)")
    p.add_argument("command", nargs="?", choices=["worker", "status", "outbox"], default="worker")
    p.add_argument("action", nargs="?", choices=["list", "retry", "delete"], help="outbox: what to do")
    p.add_argument("ids", nargs="*", help="outbox retry/delete: row ids")
    p.add_argument("--all", action="store_true", dest="all_rows", help="outbox retry: every parked row")
    p.add_argument("--queue", "-Q", action="append", default=[], dest="queues", help="only this queue (repeat)")
    p.add_argument("--check", action="store_true", help="validate, import the processors, ping Redis; exit")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error", "critical"])
    p.add_argument("--processes", type=_processes, metavar="N",
                   help="run N supervised worker processes (auto: the CPU count); overrides echomq.processes")
    p.add_argument("--supervised-child", type=int, help=argparse.SUPPRESS)
    given = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(given)

    from pyramid.paster import bootstrap, setup_logging

    from ...errors import ConfigError
    from ...host.cli import child_command_line
    from . import integration

    import os

    from . import INI_ENV

    path, _, section = args.config_uri.partition("#")  # the children of offload: process load the app from it
    os.environ.setdefault(INI_ENV, os.path.abspath(path) + (f"#{section}" if section else ""))
    try:
        setup_logging(args.config_uri)
    except Exception:
        pass  # an .ini without logging sections
    try:
        env = bootstrap(args.config_uri)
    except ConfigError as exc:
        print(f"echomq: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        state = integration(env["registry"])
        if args.command == "status":
            return state.print_status(args.queues, as_json=args.json)
        if args.command == "outbox":
            from ..outbox.commands import parse_ids, run_outbox_command

            try:
                ids = parse_ids(args.ids)
            except ValueError as exc:
                print(f"echomq: {exc}", file=sys.stderr)
                return 2
            return run_outbox_command(state.outbox, args.action or "list", ids, args.all_rows, args.json)
        return state.run_worker(
            args.queues, check=args.check, log_level=args.log_level, processes=args.processes,
            supervised_child=args.supervised_child,
            child_argv=lambda index: [sys.executable, "-m", "echomq_gevent.contrib.pyramid",
                                      *child_command_line(given, index)])
    except ConfigError as exc:
        print(f"echomq: configuration error: {exc}", file=sys.stderr)
        return 2
    finally:
        env["closer"]()


if __name__ == "__main__":
    sys.exit(main())

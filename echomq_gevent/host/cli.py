"""The ``echomq-gevent`` command.

::

    echomq-gevent -c conf/worker.yaml            run every queue of the file (one process, one hub)
    echomq-gevent -c conf/worker.yaml --processes 4
                                                 ... in four supervised worker processes
    echomq-gevent -c conf/worker.yaml --check    validate, resolve processors and plugins, ping Redis
    echomq-gevent -c conf/worker.yaml --demo     also enqueue demo jobs every second
    echomq-gevent --demo                         the same on the demo file shipped in the package
                                                 (when there is no conf/worker.yaml here)
    echomq-gevent -c FILE add QUEUE NAME JSON [--opts JSON]
    echomq-gevent -c FILE status [--json]
    echomq-gevent -c FILE dashboard [--bind HOST:PORT] [--actions] [--queue NAME ...]
    echomq-gevent --version

gevent's ``monkey.patch_all()`` runs at the top of this module (:mod:`.patch`), before it
imports anything that imports ``socket``, ``ssl``, ``threading`` users or ``redis``; the
package's ``__init__`` loads its redis-using names lazily for that reason.

This module is the command line (the parser, ``main``, running the file); the
subcommands ``add``, ``status`` and ``dashboard`` are in :mod:`.subcommands`, running a
config in this process or supervised in :mod:`.launch`, the progress line in
:mod:`.progress`, exit codes and where Redis is in :mod:`.invocation`. Their public names
are importable from here as well.

Exit codes: 0 success (also after a SIGTERM/SIGINT drain), 1 a runtime failure,
2 a configuration error, 3 Redis cannot be reached; a supervised worker process exits 4
when it recycled (:mod:`echomq_gevent.host.supervisor`).
"""
from __future__ import annotations

from .patch import PREIMPORTED  # first: patches the process for gevent (see patch.py)

import argparse  # noqa: E402
import sys  # noqa: E402
from typing import Any, List, Optional, Sequence  # noqa: E402

from .. import __version__  # noqa: E402
from .config import parse_processes  # noqa: E402
from .status import STATUS_TYPES, print_status  # noqa: E402,F401
from ..errors import ConfigError  # noqa: E402
from .invocation import (DEFAULT_CONFIG, DEMO_PLUGIN, EXIT_CONFIG, EXIT_FAILURE, EXIT_OK,  # noqa: E402,F401
                         EXIT_REDIS, load_command_config)
from .launch import (child_command_line, cmd_check, run_config, run_supervisor, serve, supervise,  # noqa: E402,F401
                     wants_supervisor)
from .logs import JsonFormatter, setup_logging  # noqa: E402,F401
from .progress import ProgressPlugin  # noqa: E402,F401
from .subcommands import cmd_add, cmd_cancel, cmd_dashboard, cmd_replay, cmd_status  # noqa: E402
from .supervised import SupervisedChild  # noqa: E402

__all__ = ["main", "build_parser", "cmd_run", "run_config", "serve", "supervise", "wants_supervisor",
           "child_command_line", "ProgressPlugin", "PREIMPORTED", "EXIT_OK", "EXIT_FAILURE", "EXIT_CONFIG",
           "EXIT_REDIS"]


def cmd_run(args: argparse.Namespace) -> int:
    """Run (or ``--check``) the file."""
    cfg = load_command_config(args)
    assert cfg is not None
    extra: List[Any] = []
    if args.demo:
        if "demo" not in cfg.queues:
            raise cfg.error(("queues",), "--demo needs a queue named 'demo' (served by the demo plugin)")
        if DEMO_PLUGIN not in cfg.plugins and "demo" not in cfg.plugins:
            extra.append(DEMO_PLUGIN)
    supervised: Optional[SupervisedChild] = None
    if args.supervised_child is not None:  # a child the supervisor started: one process, whatever the file says
        supervised = SupervisedChild.from_env(args.supervised_child, cfg)
    elif not args.check:
        processes = args.processes if args.processes is not None else cfg.processes
        if wants_supervisor(cfg, processes):  # --processes 1 without recycling: the plain single process
            return run_supervisor(cfg, processes, args)
    return run_config(cfg, extra, check=args.check, demo=args.demo, progress=not args.no_progress,
                      log_level=args.log_level, log_format=args.log_format, supervised=supervised)


# --- argument parsing ---------------------------------------------------------------------------------
def _processes_arg(value: str) -> int:
    try:
        return parse_processes(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="echomq-gevent",
        description="Run BullMQ-compatible gevent workers for the queues of a YAML file.",
        epilog="Without a command: run the workers (Ctrl-C / SIGTERM drains and exits 0).",
    )
    p.add_argument("-c", "--config", help=f"YAML file (default: $ECHOMQ_CONFIG or {DEFAULT_CONFIG})")
    p.add_argument("--check", action="store_true",
                   help="validate the file, resolve processors and plugins, ping Redis; exit 0 if all is well")
    p.add_argument("--demo", action="store_true", help="also enqueue demo jobs every second (queue 'demo'); with no file, "
                        "run the demo configuration shipped with the package")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error", "critical"],
                   help="overrides logging.level of the file")
    p.add_argument("--log-format", choices=["text", "json"], help="overrides logging.format of the file")
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")
    p.add_argument("--processes", type=_processes_arg, metavar="N",
                   help="run N supervised worker processes (auto: the CPU count); overrides processes: of the file")
    p.add_argument("--supervised-child", type=int, metavar="INDEX", help=argparse.SUPPRESS)
    p.add_argument("--redis", help="Redis URL for add/cancel/status/replay (overrides the file's redis.url)")
    p.add_argument("--prefix", help="key prefix for add/cancel/status/replay (overrides the file's prefix)")
    p.add_argument("--version", action="version",
                   version=f"echomq-gevent {__version__} (BullMQ 6.7.0 protocol)")
    sub = p.add_subparsers(dest="command")
    a = sub.add_parser("add", help="add one job: add QUEUE NAME JSON [--opts JSON]; prints the job id")
    a.add_argument("queue")
    a.add_argument("name")
    a.add_argument("data", help="job data as JSON, e.g. '{\"to\": \"ada@example.com\"}'")
    a.add_argument("--opts", help="BullMQ job options as JSON, e.g. '{\"attempts\": 3}'")
    s = sub.add_parser("status", help="job counts per queue and the workers seen")
    s.add_argument("queues", nargs="*", help="queue names (default: the file's queues)")
    s.add_argument("--json", action="store_true", help="print JSON")
    d = sub.add_parser("dashboard", help="serve the web dashboard (read-only unless --actions)")
    d.add_argument("--bind", default="127.0.0.1:8765",
                   help="HOST:PORT to listen on (default 127.0.0.1:8765; only this machine)")
    d.add_argument("--actions", action="store_true",
                   help="enable retry/promote/remove/pause/resume/clean (each confirmed, CSRF-protected)")
    d.add_argument("--queue", action="append", help="show only this queue (repeat; default: every queue found)")
    rp = sub.add_parser("replay", help="run a stored job (a failed one, say) through the local processor in this "
                                       "process, changing nothing in Redis: replay QUEUE JOB_ID [--pdb]")
    rp.add_argument("queue")
    rp.add_argument("job_id")
    rp.add_argument("--pdb", action="store_true", help="stop in the debugger where the processor raises")
    cn = sub.add_parser("cancel", help="stop a job wherever it is: a waiting one fails now, a running one is "
                                       "stopped by its worker: cancel QUEUE JOB_ID [--reason TEXT]")
    cn.add_argument("queue")
    cn.add_argument("job_id")
    cn.add_argument("--reason", help="why (at most 1,000 characters); the job fails with 'job cancelled: REASON'")
    for sp in (a, s, d, rp, cn):
        sp.add_argument("--redis", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        sp.add_argument("--prefix", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        sp.add_argument("-c", "--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``echomq-gevent`` console script and ``python -m echomq_gevent``."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "add":
            setup_logging(args.log_level or "warning", args.log_format or "text")
            return cmd_add(args)
        if args.command == "status":
            setup_logging(args.log_level or "warning", args.log_format or "text")
            return cmd_status(args)
        if args.command == "cancel":
            setup_logging(args.log_level or "warning", args.log_format or "text")
            return cmd_cancel(args)
        if args.command == "replay":
            setup_logging(args.log_level or "warning", args.log_format or "text")
            return cmd_replay(args)
        if args.command == "dashboard":
            setup_logging(args.log_level or "warning", args.log_format or "text")
            return cmd_dashboard(args)
        return cmd_run(args)
    except ConfigError as exc:
        print(f"echomq-gevent: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:
        from .embedded import EmbeddedRedisError

        if isinstance(exc, EmbeddedRedisError):
            print(f"echomq-gevent: {exc}", file=sys.stderr)
            return EXIT_REDIS
        import redis

        if isinstance(exc, redis.ConnectionError):
            print(f"echomq-gevent: Redis cannot be reached: {exc}", file=sys.stderr)
            return EXIT_REDIS
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The subcommands of ``echomq-gevent`` beside running workers: ``add`` (one job),
``cancel`` (stop one job wherever it is), ``status`` (the table of :mod:`.status`) and ``dashboard`` (the web dashboard of
:mod:`echomq_gevent.contrib.dashboard`, served until SIGTERM/SIGINT).

Each takes the parsed arguments of :func:`.cli.build_parser` and returns the exit code;
:func:`.cli.main` sets up logging and calls them.
"""
from __future__ import annotations

from .patch import PREIMPORTED  # noqa: F401 - first: patches the process for gevent

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from typing import Any, Dict, Iterator, List  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402

from .invocation import EXIT_CONFIG, EXIT_OK, CommandRedis, load_command_config  # noqa: E402
from .status import print_status  # noqa: E402

log = logging.getLogger("echomq_gevent.cli")

__all__ = ["cmd_add", "cmd_cancel", "cmd_status", "cmd_dashboard"]


@contextlib.contextmanager
def command_queue(args: argparse.Namespace) -> Iterator[Any]:
    """The ``Queue`` a one-shot subcommand acts on: ``args.queue`` on the Redis and prefix
    of ``--redis``/``--prefix``, else the file's, else the defaults; closed afterwards, with
    the embedded server this process started for it."""
    from ..queue.queue import Queue

    cfg = load_command_config(args, required=False)
    prefix = args.prefix or (cfg.prefix if cfg else "bull")
    conn = CommandRedis(cfg, args.redis)
    try:
        queue = Queue(args.queue, connection=conn.url, prefix=prefix)
        try:
            yield queue
        finally:
            queue.close()
    finally:
        conn.close()


def cmd_add(args: argparse.Namespace) -> int:
    """``add QUEUE NAME JSON [--opts JSON]``: add one job; prints its id."""
    from ..errors import EchoMQError

    try:
        data = json.loads(args.data)
    except ValueError as exc:
        print(f"echomq-gevent add: JSON data is not valid JSON: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        opts = json.loads(args.opts) if args.opts else None
    except ValueError as exc:
        print(f"echomq-gevent add: --opts is not valid JSON: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if opts is not None and not isinstance(opts, dict):
        print("echomq-gevent add: --opts must be a JSON object of BullMQ job options", file=sys.stderr)
        return EXIT_CONFIG
    with command_queue(args) as queue:
        try:
            job = queue.add(args.name, data, opts)
        except (EchoMQError, ValueError, TypeError) as exc:
            print(f"echomq-gevent add: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        print(job.id)
        return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """``status [QUEUE...] [--json]``: job counts per queue, the workers seen, the job
    schedulers with their next run and, when a supervisor runs the file on this host, its
    worker processes."""
    cfg = load_command_config(args, required=False)
    prefix = args.prefix or (cfg.prefix if cfg else "bull")
    names: List[str] = list(args.queues) or (list(cfg.queues) if cfg else [])
    if not names and not (cfg and any(p.patterns for p in cfg.pools.values())):
        print("echomq-gevent status: name the queues, or give -c FILE", file=sys.stderr)
        return EXIT_CONFIG
    conn = CommandRedis(cfg, args.redis)
    try:
        from .process_state import read_states

        from .pools import describe_pools

        supervisors = read_states(cfg.filename) if cfg is not None else []
        pools = describe_pools(cfg, names) if cfg else []
        return print_status(conn.url, names, prefix, as_json=args.json, supervisors=supervisors, pools=pools)
    finally:
        conn.close()


def cmd_replay(args: argparse.Namespace) -> int:
    """``replay QUEUE JOB_ID [--pdb]``: run a stored job through the file's processor in
    this process, changing nothing in Redis (:mod:`echomq_gevent.host.replay`)."""
    from .replay import replay

    cfg = load_command_config(args, required=True)
    assert cfg is not None
    if args.prefix:
        import dataclasses

        cfg = dataclasses.replace(cfg, prefix=args.prefix)
    conn = CommandRedis(cfg, args.redis)
    try:
        return replay(cfg, conn.url, args.queue, args.job_id, use_pdb=args.pdb)
    finally:
        conn.close()


def cmd_cancel(args: argparse.Namespace) -> int:
    """``cancel QUEUE JOB_ID [--reason TEXT]``: stop a job wherever it is
    (``Queue.cancel_job``); prints what happened. Exit 0 when the job was cancelled, its
    worker signalled, or it had already finished; 2 for a job that does not exist or a
    bad reason (nothing written); 3 when Redis cannot be reached."""

    with command_queue(args) as queue:
        try:
            out = queue.cancel_job(args.job_id, args.reason)
        except ValueError as exc:
            print(f"echomq-gevent cancel: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        if out.outcome in ("missing", "unknown"):
            print(f"echomq-gevent cancel: {out.describe()} (queue {args.queue!r}, prefix {queue.prefix!r})",
                  file=sys.stderr)
            return EXIT_CONFIG
        print(out.describe())
        return EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    """``dashboard [--bind HOST:PORT] [--actions]``: serve the web dashboard until SIGTERM/SIGINT."""
    from ..contrib.dashboard import Dashboard, auth_from_env, parse_bind, serve

    try:
        host, port = parse_bind(args.bind)
        auth = auth_from_env()
    except ValueError as exc:
        print(f"echomq-gevent dashboard: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    cfg = load_command_config(args, required=False)
    prefix = args.prefix or (cfg.prefix if cfg else "bull")
    conn = CommandRedis(cfg, args.redis)
    try:
        conn.ping()
        processes = None
        if cfg is not None and cfg.filename:
            from .process_state import read_states

            def processes() -> List[Dict[str, Any]]:
                return read_states(cfg.filename)
        from .pools import describe_pools

        app = Dashboard(conn.url, prefix=prefix, queues=args.queue or None, actions=args.actions, auth=auth,
                        known_queues=list(cfg.queues) if cfg else (), processes=processes,
                        pools=describe_pools(cfg) if cfg else ())
        server = serve(app, host, port, log=None)
        stop = gevent.event.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(sig, stop.set)
        log.warning("dashboard on http://%s:%d/ (%s%s), prefix %r", host if ":" not in host else f"[{host}]",
                    server.server_port, "actions enabled" if args.actions else "read-only",
                    ", basic auth" if auth else "", prefix)
        stop.wait()
        server.stop(timeout=2)
        app.close()
        return EXIT_OK
    finally:
        conn.close()

"""Running a loaded config from the command: in this process (:func:`run_config`, which
:func:`serve` runs on the main hub with the progress line and the ``--demo`` producer;
``--check``: :func:`cmd_check`) or in supervised worker processes (:func:`supervise`).

``echomq-gevent -c FILE`` (:mod:`.cli`) and the framework commands (``manage.py
echomq_worker``, ``flask echomq worker``, the Pyramid runner) come here after reading their
config; they import these names from :mod:`.cli`, which patches the process first (as this
module does, through :mod:`.patch`).
"""
from __future__ import annotations

from .patch import PREIMPORTED

import argparse  # noqa: E402
import gc  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Sequence  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402

from .. import __version__  # noqa: E402
from .config import Config, redact_url  # noqa: E402
from .invocation import EXIT_FAILURE, EXIT_OK, EXIT_REDIS, CommandRedis  # noqa: E402
from .logs import setup_logging  # noqa: E402
from .logs import isatty as _isatty  # noqa: E402
from .progress import ProgressPlugin, progress_loop  # noqa: E402
from .queue_gauges import QueueGauges  # noqa: E402
from .runner import Runner, build_plugin_host  # noqa: E402
from .supervised import SupervisedChild  # noqa: E402

log = logging.getLogger("echomq_gevent.cli")

__all__ = ["serve", "run_config", "cmd_check", "supervise", "run_supervisor", "wants_supervisor",
           "child_command_line"]


def cmd_check(cfg: Config, host: Any, processors: Dict[str, Any]) -> int:
    """``--check``: config and plugins resolved (done by the caller); now Redis."""
    plugins = [name for name, _p in host.pm.list_name_plugin()]
    print(f"{cfg.filename}: OK")
    print(f"  plugins: {', '.join(plugins)}")
    for name, q in cfg.queues.items():
        proc = q.processor or "plugins"
        print(f"  queue {name}: processor {proc}, concurrency {q.options['concurrency']}")
    for pool in cfg.pools.values():
        found = (f"; patterns {', '.join(pool.patterns)}, processor {pool.processor or 'plugins'}, "
                 f"{pool.family_options['concurrency']} slots each at most" if pool.patterns else "")
        turn = f", turns of {pool.turn} jobs" if pool.turn > 1 else ""
        print(f"  pool {pool.name}: {pool.order}{turn}, {pool.concurrency} slots, queues "
              f"{', '.join(pool.queues) or '-'}{found}")
    try:
        conn = CommandRedis(cfg, None)
    except Exception as exc:
        print(f"{cfg.filename}: the embedded Redis cannot start: {exc}", file=sys.stderr)
        return EXIT_REDIS
    try:
        conn.ping()
    except Exception as exc:
        print(f"{cfg.filename}: Redis at {redact_url(conn.url)} does not answer: {exc}", file=sys.stderr)
        return EXIT_REDIS
    finally:
        conn.close()
    print(f"  redis: {redact_url(conn.url) if cfg.redis.url != 'embedded' else 'embedded'} answers PING")
    return EXIT_OK


def _demo_loop(cfg: Config, url: str, stopping: Any) -> None:
    """``--demo``: enqueue a few demo jobs every second until the workers stop."""
    from ..queue.queue import Queue

    from ..contrib import demo

    queue = Queue(demo.QUEUE, connection=url, prefix=cfg.prefix)
    try:
        while not stopping.wait(1.0):
            try:
                demo.enqueue_demo_jobs(queue, 5)
            except Exception as exc:
                log.warning("demo: could not enqueue jobs: %s", exc)
    finally:
        queue.close()


def serve(cfg: Config, host: Any, processors: Dict[str, Any], url: str, demo: bool = False,
          progress: Optional[ProgressPlugin] = None, progress_stream: Any = None,
          supervised: Optional[SupervisedChild] = None) -> int:
    """Run every queue of ``cfg`` in this process (a :class:`~echomq_gevent.host.runner.Runner`
    on the main hub) until the workers stop; returns the exit code. The first
    SIGTERM/SIGINT drains (in-flight jobs finish or are handed back after
    ``shutdown_timeout``); a second one hands the unfinished jobs back at once.
    ``supervised``: this process is a supervisor's child (it reports, recycles, watches
    its parent; only child 1 runs the demo producer)."""
    runner = Runner(cfg, url, host=host, processors=processors)
    runner.handle_signals()
    runner.start()
    if cfg.gc_freeze:
        # what is loaded by now (our modules, the plugins, the processors, the workers)
        # lives as long as the process: out of the cyclic collector's reach, a full
        # collection scans only what jobs make (one full collection held back every job of
        # a burst by 15 ms; the schedulers case of the scale bench)
        gc.collect()
        gc.freeze()
    if supervised is not None:
        supervised.start(runner)
    done = gevent.event.Event()
    side: List[gevent.Greenlet] = []
    if demo and (supervised is None or supervised.index == 1):
        side.append(gevent.spawn(_demo_loop, cfg, url, runner.stopping_event))
    if progress is not None and progress_stream is not None:
        side.append(gevent.spawn(progress_loop, progress, progress_stream, list(cfg.queues), runner, done))
    log.info("echomq-gevent %s: %d queue(s) (%s), prefix %r", __version__, len(runner.workers),
             ", ".join(cfg.queues), cfg.prefix)
    runner.wait()
    runner.stopping_event.set()
    done.set()
    gevent.joinall(side, timeout=5)
    runner.stop_handling_signals()
    if supervised is not None:
        supervised.stop()
    if progress is not None:
        log.info("stopped: %s", progress.summary())
    if runner.failed:
        return EXIT_FAILURE
    if supervised is not None:
        return supervised.exit_code() or EXIT_OK
    return EXIT_OK


def run_supervisor(cfg: Config, processes: int, args: argparse.Namespace) -> int:
    """``echomq-gevent -c FILE`` with more than one process or a recycling limit: the
    children run this command with ``-c FILE`` (:func:`supervise`)."""
    child_args: List[str] = []
    if args.log_level:
        child_args += ["--log-level", args.log_level]
    if args.log_format:
        child_args += ["--log-format", args.log_format]
    return supervise(cfg, processes, processes_override=args.processes, demo=args.demo,
                     log_level=args.log_level, log_format=args.log_format, child_args=child_args)


def wants_supervisor(cfg: Config, processes: Optional[int]) -> bool:
    """Whether a worker command runs the supervisor: more than one process (``processes``
    from the command line, else the config's), or a recycling limit."""
    count = processes if processes is not None else cfg.processes
    return count > 1 or cfg.max_jobs_per_process is not None or cfg.max_memory_per_process is not None


def supervise(cfg: Config, processes: Optional[int] = None, *, processes_override: Optional[int] = None,
              demo: bool = False, log_level: Optional[str] = None, log_format: Optional[str] = None,
              child_args: Sequence[str] = (), child_argv: Optional[Callable[[int], List[str]]] = None) -> int:
    """Run ``processes`` (default: the config's) supervised worker processes of ``cfg``
    (:class:`~echomq_gevent.host.supervisor.Supervisor`) and return its exit code. The
    parent connects to no Redis; with ``url: embedded`` it starts the embedded server
    (the children use it, and it outlives their recycling). ``child_argv(index)``: the
    command line of child ``index`` (the framework commands give their own; default:
    this command with ``-c FILE``)."""
    from .supervisor import SharedMetrics, Supervisor

    setup_logging(log_level or cfg.log_level, log_format or cfg.log_format, process=f"supervisor/{os.getpid()}")
    if PREIMPORTED:
        log.warning("these modules were imported before gevent patched the standard library: %s",
                    ", ".join(PREIMPORTED))
    count = processes_override or processes or cfg.processes
    conn = CommandRedis(cfg, None) if cfg.redis.url == "embedded" else None
    # the host's one look at its queues: the gauges it serves, and late schedulers logged
    gauges = QueueGauges.for_config(cfg, conn.url if conn is not None else cfg.redis.url)
    watcher = gauges.watch_late()
    try:
        metrics = SharedMetrics(gauges) if SharedMetrics.wanted(cfg) else None
        return Supervisor(cfg, count, child_args, processes_override=processes_override, demo=demo,
                          metrics=metrics, child_argv=child_argv).run()
    finally:
        watcher.kill(block=False)
        if conn is not None:
            conn.close()


def child_command_line(argv: Sequence[str], index: int) -> List[str]:
    """``argv`` (a worker command's own arguments) without ``--processes N`` and with
    ``--supervised-child INDEX``: how a framework command starts its children."""
    out: List[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return out + ["--supervised-child", str(index)]


def run_config(cfg: Config, extra_plugins: Sequence[Any] = (), check: bool = False, demo: bool = False,
               progress: bool = True, log_level: Optional[str] = None,
               log_format: Optional[str] = None, supervised: Optional[SupervisedChild] = None) -> int:
    """Run (or, with ``check``, validate) the workers of a loaded config in this process
    and return the exit code: what ``echomq-gevent -c FILE`` does after reading the file.

    The framework commands (``manage.py echomq_worker``, ``flask echomq worker``, the
    Pyramid runner) call it with the config they built from the app's settings and their
    own plugins in ``extra_plugins``. Logging is set up from the config unless
    ``log_level``/``log_format`` override it; ``progress`` draws the progress line when
    stderr is a terminal. ``supervised`` is set in a child of the supervisor. Raises
    ConfigError for a plugin or processor that fails.

    It always runs one process: the file's ``processes`` and recycling limits are the
    supervisor's (:func:`supervise`), which the caller runs instead when they ask for it.
    """
    setup_logging(log_level or cfg.log_level, log_format or cfg.log_format,
                  process=supervised.label if supervised is not None else None)
    if PREIMPORTED:
        log.warning("these modules were imported before gevent patched the standard library: %s",
                    ", ".join(PREIMPORTED))
    counter = ProgressPlugin()
    extra = tuple(extra_plugins) + (counter,) + ((supervised,) if supervised is not None else ())
    host, processors = build_plugin_host(cfg, extra)
    if check:
        return cmd_check(cfg, host, processors)
    conn = CommandRedis(cfg, None)  # starts the embedded server when the config asks for it
    try:
        conn.ping()
    except Exception as exc:
        log.error("Redis cannot be reached (%s): %s", redact_url(conn.url), exc)
        conn.close()
        return EXIT_REDIS
    # a single process is its host's one look at late schedulers (a supervisor's child is not)
    watcher = QueueGauges.for_config(cfg, conn.url).watch_late() if supervised is None else None
    try:
        stream = sys.stderr if (_isatty(sys.stderr) and progress) else None
        return serve(cfg, host, processors, conn.url, demo=demo, progress=counter,
                     progress_stream=stream, supervised=supervised)
    finally:
        if watcher is not None:
            watcher.kill(block=False)
        conn.close()

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

gevent's ``monkey.patch_all()`` runs at the top of this module, before it imports
anything that imports ``socket``, ``ssl``, ``threading`` users or ``redis``; the
package's ``__init__`` loads its redis-using names lazily for that reason.

Exit codes: 0 success (also after a SIGTERM/SIGINT drain), 1 a runtime failure,
2 a configuration error, 3 Redis cannot be reached; a supervised worker process exits 4
when it recycled (:mod:`echomq_gevent.host.supervisor`).
"""
from __future__ import annotations

import sys

#: Modules that were already imported when the patch ran (should be none of these).
_IMPORTED = tuple(m for m in ("ssl", "redis", "urllib3", "requests") if m in sys.modules)

from gevent import monkey  # noqa: E402

#: (none when the program patched the process itself before importing them)
PREIMPORTED = () if monkey.is_module_patched("socket") else _IMPORTED

if not monkey.is_module_patched("socket"):
    monkey.patch_all()

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Sequence  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402

from .. import __version__  # noqa: E402
from .config import Config, load_config, parse_processes, redact_url  # noqa: E402
from .status import STATUS_TYPES, print_status  # noqa: E402,F401
from ..errors import ConfigError  # noqa: E402
from ..plugins.hookspecs import hookimpl  # noqa: E402
from .logs import JsonFormatter, setup_logging  # noqa: E402,F401
from .logs import isatty as _isatty  # noqa: E402
from .runner import Runner, build_plugin_host  # noqa: E402
from .supervised import SupervisedChild  # noqa: E402

log = logging.getLogger("echomq_gevent.cli")

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_REDIS = 0, 1, 2, 3
DEFAULT_CONFIG = "conf/worker.yaml"
DEMO_PLUGIN = "echomq_gevent.contrib.demo"


# --- the progress line -------------------------------------------------------------------------
class ProgressPlugin:
    """Telemetry plugin the CLI registers: counts job events for the progress line and the
    final summary. Hooks run on job greenlets; they only bump counters."""

    def __init__(self) -> None:
        self.__name__ = "echomq_gevent.cli.progress"  # the name pluggy lists it under
        self.running = 0
        self.completed = 0
        self.failed = 0
        self.retried = 0
        self.handed_back = 0
        self.started_at = time.monotonic()
        self._last = (self.started_at, 0)
        self.rate = 0.0

    @hookimpl
    def echomq_job_active(self, worker: Any, job: Any) -> None:
        self.running += 1

    def _done(self) -> None:
        self.running = max(0, self.running - 1)

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        self._done()
        self.completed += 1

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        self._done()
        self.failed += 1

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        self._done()
        self.retried += 1

    @hookimpl
    def echomq_job_lock_lost(self, worker: Any, job: Any) -> None:
        self._done()

    @hookimpl
    def echomq_job_handed_back(self, worker: Any, job: Any) -> None:
        self._done()
        self.handed_back += 1

    def line(self, queues: Sequence[str], state: str = "") -> str:
        now = time.monotonic()
        then, done_then = self._last
        done = self.completed + self.failed
        if now - then >= 1.0:
            self.rate = (done - done_then) / (now - then)
            self._last = (now, done)
        names = ", ".join(queues)
        text = (f"[echomq] {names}: {self.running} running | {self.completed} completed | "
                f"{self.failed} failed | {self.retried} retried | {self.rate:.1f} jobs/s")
        return text + (f" | {state}" if state else "")

    def summary(self) -> str:
        return (f"{self.completed} completed, {self.failed} failed, {self.retried} retried, "
                f"{self.handed_back} handed back in {time.monotonic() - self.started_at:.1f} s")


# --- helpers ----------------------------------------------------------------------------------------
def _redis_url(cfg: Optional[Config], override: Optional[str]) -> str:
    if override:
        return override
    if cfg is None:
        from .config import DEFAULT_REDIS_URL

        return DEFAULT_REDIS_URL
    return cfg.redis.url


def _embedded_for(cfg: Config) -> Any:
    from .embedded import EmbeddedRedis

    return EmbeddedRedis(directory=cfg.redis.embedded_dir, port=cfg.redis.embedded_port,
                         persist=cfg.redis.embedded_persist)


class _Connection:
    """Where Redis is for this command: a URL, plus the embedded server when this process
    started one (stopped by :meth:`close`)."""

    def __init__(self, cfg: Optional[Config], override: Optional[str]) -> None:
        self.embedded: Any = None
        url = _redis_url(cfg, override)
        if url == "embedded":
            assert cfg is not None
            self.embedded = _embedded_for(cfg).start()
            url = self.embedded.url
            if self.embedded.owned:
                log.info("started the embedded Redis at %s (data in %s)", url, self.embedded.directory)
            else:
                log.info("using the embedded Redis already running at %s", url)
        self.url = url

    def ping(self) -> None:
        from ..connection.clients import make_client

        client = make_client(self.url, socket_connect_timeout=5, socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()

    def close(self) -> None:
        if self.embedded is not None and self.embedded.owned:
            self.embedded.stop()
            log.info("stopped the embedded Redis")


def _load(args: argparse.Namespace, required: bool = True) -> Optional[Config]:
    path = args.config or os.environ.get("ECHOMQ_CONFIG")
    if not path:
        if os.path.exists(DEFAULT_CONFIG):
            path = DEFAULT_CONFIG
        elif getattr(args, "demo", False):  # no file of the user's: the demo's own, shipped with the package
            from ..contrib import demo

            path = demo.CONFIG
        elif required:
            path = DEFAULT_CONFIG
        else:
            return None
    cfg = load_config(path)
    cfg.activate_paths()
    return cfg


# --- commands --------------------------------------------------------------------------------------
def cmd_add(args: argparse.Namespace) -> int:
    """``add QUEUE NAME JSON [--opts JSON]``: add one job; prints its id."""
    from ..errors import EchoMQError
    from ..queue.queue import Queue

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
    cfg = _load(args, required=False)
    prefix = args.prefix or (cfg.prefix if cfg else "bull")
    conn = _Connection(cfg, args.redis)
    try:
        queue = Queue(args.queue, connection=conn.url, prefix=prefix)
        try:
            job = queue.add(args.name, data, opts)
        except (EchoMQError, ValueError, TypeError) as exc:
            print(f"echomq-gevent add: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        finally:
            queue.close()
        print(job.id)
        return EXIT_OK
    finally:
        conn.close()


def cmd_status(args: argparse.Namespace) -> int:
    """``status [QUEUE...] [--json]``: job counts per queue, the workers seen, the job
    schedulers with their next run and, when a supervisor runs the file on this host, its
    worker processes."""
    cfg = _load(args, required=False)
    prefix = args.prefix or (cfg.prefix if cfg else "bull")
    names: List[str] = list(args.queues) or (list(cfg.queues) if cfg else [])
    if not names:
        print("echomq-gevent status: name the queues, or give -c FILE", file=sys.stderr)
        return EXIT_CONFIG
    conn = _Connection(cfg, args.redis)
    try:
        from .process_state import read_states

        supervisors = read_states(cfg.filename) if cfg is not None else []
        return print_status(conn.url, names, prefix, as_json=args.json, supervisors=supervisors)
    finally:
        conn.close()


def cmd_dashboard(args: argparse.Namespace) -> int:
    """``dashboard [--bind HOST:PORT] [--actions]``: serve the web dashboard until SIGTERM/SIGINT."""
    from ..contrib.dashboard import Dashboard, auth_from_env, parse_bind, serve

    try:
        host, port = parse_bind(args.bind)
        auth = auth_from_env()
    except ValueError as exc:
        print(f"echomq-gevent dashboard: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    cfg = _load(args, required=False)
    prefix = args.prefix or (cfg.prefix if cfg else "bull")
    conn = _Connection(cfg, args.redis)
    try:
        conn.ping()
        processes = None
        if cfg is not None and cfg.filename:
            from .process_state import read_states

            def processes() -> List[Dict[str, Any]]:
                return read_states(cfg.filename)
        app = Dashboard(conn.url, prefix=prefix, queues=args.queue or None, actions=args.actions, auth=auth,
                        known_queues=list(cfg.queues) if cfg else (), processes=processes)
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


def cmd_check(cfg: Config, host: Any, processors: Dict[str, Any]) -> int:
    """``--check``: config and plugins resolved (done by the caller); now Redis."""
    plugins = [name for name, _p in host.pm.list_name_plugin()]
    print(f"{cfg.filename}: OK")
    print(f"  plugins: {', '.join(plugins)}")
    for name, q in cfg.queues.items():
        proc = q.processor or "plugins"
        print(f"  queue {name}: processor {proc}, concurrency {q.options['concurrency']}")
    try:
        conn = _Connection(cfg, None)
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


def _progress_loop(progress: ProgressPlugin, stream: Any, names: List[str], runner: Any,
                   done: Any) -> None:
    """The progress line on a terminal, redrawn twice a second until ``done``."""
    while not done.wait(0.5):
        state = "draining" if runner.stopping else ""
        try:
            stream.write("\r\x1b[K" + progress.line(names, state))
            stream.flush()
        except Exception:
            return
    try:
        stream.write("\r\x1b[K")
        stream.flush()
    except Exception:
        pass


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
        side.append(gevent.spawn(_progress_loop, progress, progress_stream, list(cfg.queues), runner, done))
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


def cmd_run(args: argparse.Namespace) -> int:
    """Run (or ``--check``) the file."""
    cfg = _load(args)
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
    conn = _Connection(cfg, None) if cfg.redis.url == "embedded" else None
    try:
        metrics = SharedMetrics() if SharedMetrics.wanted(cfg) else None
        return Supervisor(cfg, count, child_args, processes_override=processes_override, demo=demo,
                          metrics=metrics, child_argv=child_argv).run()
    finally:
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
    conn = _Connection(cfg, None)  # starts the embedded server when the config asks for it
    try:
        conn.ping()
    except Exception as exc:
        log.error("Redis cannot be reached (%s): %s", redact_url(conn.url), exc)
        conn.close()
        return EXIT_REDIS
    try:
        stream = sys.stderr if (_isatty(sys.stderr) and progress) else None
        return serve(cfg, host, processors, conn.url, demo=demo, progress=counter,
                     progress_stream=stream, supervised=supervised)
    finally:
        conn.close()


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
    p.add_argument("--redis", help="Redis URL for add/status (overrides the file's redis.url)")
    p.add_argument("--prefix", help="key prefix for add/status (overrides the file's prefix)")
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
    for sp in (a, s, d):
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

"""Run the YAML's job workers inside gunicorn's gevent worker processes.

A gunicorn config file needs only::

    from echomq_gevent.contrib.gunicorn import install
    install(globals(), config="conf/worker.yaml")

``install`` runs in the gunicorn master when it reads the config file (and again on
every HUP). It validates the YAML at once (a bad file stops gunicorn before any worker
forks) and wraps these server hooks, calling any hook the file defined *before* the
``install`` line as well (it chains, it never replaces):

``on_starting`` (master, once)
    starts the embedded Redis when the YAML says ``redis: {url: embedded}``, and clears
    stale Prometheus multiprocess files.
``post_worker_init`` (each worker process, main greenlet, after the app is loaded)
    checks that gevent patched the process (``-k gevent``), wraps the app in the
    health/metrics middleware (unless it already is), builds one
    :class:`~echomq_gevent.worker.Worker` per queue of the YAML, all sharing one plugin
    host, starts them on this process's hub (each starts its own lock-renewal thread),
    and spawns a watcher greenlet that notices ``worker.alive`` turning false. There
    is no SIGTERM hook inside a gunicorn worker: SIGTERM, ``max_requests`` recycling
    and a HUP reload all show up only as ``alive = False``, and the drain starts then.
``worker_exit`` (each worker process, main greenlet, after the HTTP side stopped)
    waits for the drain until ``min(graceful_timeout, timeout) - margin`` after it
    started, then hands the unfinished jobs back to ``wait`` so another process takes
    them at once.
``worker_int`` (SIGINT/SIGQUIT: gunicorn's quick shutdown)
    hands every in-flight job back at once.
``worker_abort`` (SIGABRT: gunicorn's timeout, the hub was stuck)
    logs what every greenlet and thread was doing and which jobs were in flight.
``child_exit`` (master)
    tells ``prometheus_client`` that the process is gone (multiprocess mode).
``on_exit`` (master)
    stops the embedded Redis and removes the metrics directory this module made.

Everything here runs on the process's main thread; the job greenlets share the hub
with the request greenlets. See ``docs/gunicorn.md``.
"""
from __future__ import annotations

import gc
import glob
import logging
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, MutableMapping, Optional

from ..config import Config, load_config
from ..errors import ConfigError

__all__ = ["install", "current", "CoHost", "Settings", "settings"]

log = logging.getLogger("echomq_gevent.gunicorn")

#: Name of the environment variable prometheus_client reads for multiprocess mode.
PROM_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

_HOOK_MARK = "_echomq_gunicorn_hook"


class Settings:
    """What :func:`install` decided, made in the master and inherited by every forked
    worker process (read by :class:`CoHost` and by the WSGI middleware)."""

    def __init__(self, config_path: str, config: Config, drain_margin: Optional[float],
                 metrics: bool, poll_interval: float, extra_plugins: tuple,
                 gc_freeze: bool = True, endpoints: bool = True) -> None:
        self.config_path = config_path
        self.config = config
        self.drain_margin = drain_margin
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.extra_plugins = extra_plugins
        self.gc_freeze = gc_freeze
        self.endpoints = endpoints

    @property
    def redis_url(self) -> str:
        """The Redis URL the workers and the shared queues use (the embedded server's
        URL once the master started it)."""
        if self.config.redis.embedded:
            if _embedded_url is None:
                raise ConfigError(
                    f"{self.config_path}: redis.url is 'embedded' but the embedded Redis has not "
                    f"started in the gunicorn master (on_starting did not run): set a redis:// URL "
                    f"or run under gunicorn with install() in the config file"
                )
            return _embedded_url
        return self.config.redis.url

    @property
    def prefix(self) -> str:
        return self.config.prefix


_settings: Optional[Settings] = None
_cohost: Optional["CoHost"] = None
_embedded: Any = None
_embedded_url: Optional[str] = None
_owned_prom_dir: Optional[str] = None


def settings() -> Optional[Settings]:
    """The settings :func:`install` made in this process tree, or ``None``."""
    return _settings


def current() -> Optional["CoHost"]:
    """The job workers of this gunicorn worker process, or ``None`` before
    ``post_worker_init`` (or outside gunicorn). Called by the WSGI middleware on
    request greenlets."""
    return _cohost


# --- install ---------------------------------------------------------------------------------
def install(namespace: MutableMapping[str, Any], config: str = "conf/worker.yaml", *,
            drain_margin: Optional[float] = None, metrics: bool = True,
            poll_interval: float = 0.1, extra_plugins: tuple = (), gc_freeze: bool = True,
            endpoints: bool = True) -> Settings:
    """Wire the job workers of the YAML file ``config`` into a gunicorn config module.

    Call it from the gunicorn config file, after the file's own hooks, as
    ``install(globals(), config=...)``. A relative ``config`` is looked up in the working
    directory, then beside the gunicorn config file. ``drain_margin`` (seconds) is kept
    free at the end of ``graceful_timeout`` for the hand-back (default: 2 s, at most a
    quarter of the budget). ``metrics`` turns on prometheus_client's multiprocess mode
    (a private directory unless ``PROMETHEUS_MULTIPROC_DIR`` is set), so
    ``/_echomq/metrics`` sums every worker process. ``extra_plugins`` are plugin modules
    or objects added after the YAML's. ``gc_freeze`` moves everything loaded before the
    job workers start into the garbage collector's permanent generation
    (``gc.freeze()``), which keeps full collections short while jobs run. ``endpoints``
    wraps the loaded WSGI app in :class:`~echomq_gevent.contrib.wsgi.EchoMQMiddleware`
    (unless it already is), so ``/_echomq/live|ready|metrics`` work without touching the app.

    Runs in the gunicorn master at config load (again on HUP). Raises ConfigError naming
    the file, line and key when the YAML is wrong, which stops gunicorn before it forks;
    on a HUP a broken file is logged and the previous configuration kept.
    """
    global _settings
    path = _resolve_config_path(config, namespace.get("__file__"))
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        if _settings is None or _settings.config_path != path:
            raise
        # A HUP re-reads the file: a mistake then must not take the running server down
        # (gunicorn exits when its config file raises); keep what was loaded before.
        log.error("%s; the job workers keep the configuration loaded before (fix the file and "
                  "send HUP again)", exc)
        cfg = _settings.config
    _settings = Settings(path, cfg, drain_margin, metrics, poll_interval, tuple(extra_plugins),
                         gc_freeze, endpoints)
    if metrics:
        _prepare_prometheus_dir()
    _chain(namespace, "on_starting", _on_starting, ours_first=True)
    _chain(namespace, "post_worker_init", _post_worker_init, ours_first=False)
    _chain(namespace, "worker_int", _worker_int, ours_first=True)
    _chain(namespace, "worker_abort", _worker_abort, ours_first=True)
    _chain(namespace, "worker_exit", _worker_exit, ours_first=True)
    _chain(namespace, "child_exit", _child_exit, ours_first=False)
    _chain(namespace, "on_exit", _on_exit, ours_first=False)
    namespace.setdefault("worker_class", "gevent")
    return _settings


def _resolve_config_path(config: str, conf_file: Optional[str]) -> str:
    if os.path.isabs(config) or os.path.exists(config) or not conf_file:
        return os.path.abspath(config)
    beside = os.path.join(os.path.dirname(os.path.abspath(conf_file)), config)
    return beside if os.path.exists(beside) else os.path.abspath(config)


def _chain(namespace: MutableMapping[str, Any], name: str, ours: Callable[..., None],
           ours_first: bool) -> None:
    """Put a hook in ``namespace[name]`` that calls ours and the file's own one.

    The file's hook always runs, even when ours raises (ours is logged), except in
    ``post_worker_init`` where a failure must stop the worker from booting. A hook made
    by an earlier ``install`` (HUP re-reads the file) is unwrapped, not wrapped twice.
    """
    theirs = namespace.get(name)
    if theirs is not None and getattr(theirs, _HOOK_MARK, False):
        theirs = getattr(theirs, "_echomq_theirs", None)
    strict = name == "post_worker_init"

    def call_ours(*args: Any) -> None:
        if strict:
            ours(*args)
            return
        try:
            ours(*args)
        except Exception:
            log.exception("echomq_gevent %s hook failed", name)

    def run(*args: Any) -> None:
        if ours_first:
            try:
                call_ours(*args)
            finally:
                if theirs is not None:
                    theirs(*args)
        else:
            if theirs is not None:
                theirs(*args)
            call_ours(*args)

    # gunicorn checks the arity of each hook, so give each its exact signature.
    if name in ("worker_exit", "child_exit"):
        def hook(server: Any, worker: Any) -> None:
            run(server, worker)
    else:
        def hook(arg: Any) -> None:  # type: ignore[misc]
            run(arg)
    hook.__name__ = name
    setattr(hook, _HOOK_MARK, True)
    hook._echomq_theirs = theirs  # type: ignore[attr-defined]
    namespace[name] = hook


# --- master-side hooks ------------------------------------------------------------------------
def _prepare_prometheus_dir() -> None:
    """Make sure every process will use prometheus_client's multiprocess mode.

    Must run before prometheus_client is imported in the master (it picks its value
    class at import), which is why install() does it at config load.
    """
    global _owned_prom_dir
    if os.environ.get(PROM_DIR_ENV):
        os.makedirs(os.environ[PROM_DIR_ENV], exist_ok=True)
        return
    _owned_prom_dir = tempfile.mkdtemp(prefix="echomq-prometheus-")
    os.environ[PROM_DIR_ENV] = _owned_prom_dir
    import sys

    if "prometheus_client" in sys.modules:
        log.warning("prometheus_client was imported before install() set %s; metrics of "
                    "this master process are not shared (import it after install())", PROM_DIR_ENV)


def _on_starting(server: Any) -> None:
    """Master, once at start: clear stale metric files, start the embedded Redis."""
    global _embedded, _embedded_url
    prom_dir = os.environ.get(PROM_DIR_ENV)
    if _settings is not None and _settings.metrics and prom_dir:
        # prometheus_client's rule: the directory is wiped between runs of the server.
        for f in glob.glob(os.path.join(prom_dir, "*.db")):
            try:
                os.remove(f)
            except OSError:
                pass
    if _settings is not None and _settings.config.redis.embedded and _embedded is None:
        _embedded, _embedded_url = _start_embedded(_settings.config)
        log.info("embedded Redis for the job workers at %s", _embedded_url)


def _start_embedded(cfg: Config) -> Any:
    """Start (or attach to) the private Redis the YAML asks for; return ``(handle, url)``.

    Started in the master, so every forked worker process shares the one server."""
    from ..embedded import EmbeddedRedis

    rs = cfg.redis
    handle = EmbeddedRedis(directory=rs.embedded_dir, port=rs.embedded_port,
                           persist=rs.embedded_persist).start()
    return handle, handle.url


def _child_exit(server: Any, worker: Any) -> None:
    """Master, after a worker process ended: drop its live gauges from the metric files."""
    if _settings is None or not _settings.metrics or not os.environ.get(PROM_DIR_ENV):
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def _on_exit(server: Any) -> None:
    """Master, at exit: stop the embedded Redis, remove the metrics directory we made."""
    global _embedded, _embedded_url, _owned_prom_dir
    if _embedded is not None:
        try:
            _embedded.stop()
        finally:
            _embedded = None
            _embedded_url = None
    if _owned_prom_dir and os.environ.get(PROM_DIR_ENV) == _owned_prom_dir:
        shutil.rmtree(_owned_prom_dir, ignore_errors=True)
        _owned_prom_dir = None


# --- worker-side hooks ------------------------------------------------------------------------
def _post_worker_init(gworker: Any) -> None:
    global _cohost
    if _settings is None:
        raise RuntimeError("echomq_gevent.contrib.gunicorn: install() has not run in this process tree")
    cohost = CoHost(_settings, gworker)
    _cohost = cohost
    cohost.start()
    if _settings.endpoints and getattr(gworker, "wsgi", None) is not None:
        from .wsgi import EchoMQMiddleware

        if not isinstance(gworker.wsgi, EchoMQMiddleware):
            # the app was loaded just before this hook; the HTTP server starts after it
            gworker.wsgi = EchoMQMiddleware(gworker.wsgi)


def _worker_exit(server: Any, gworker: Any) -> None:
    # gunicorn also calls worker_exit in the master for a worker that vanished; only the
    # worker process itself has a CoHost.
    cohost = _cohost
    if cohost is None or cohost.pid != os.getpid():
        return
    cohost.finish()


def _worker_int(gworker: Any) -> None:
    cohost = _cohost
    if cohost is None or cohost.pid != os.getpid():
        return
    cohost.hand_back_now("gunicorn asked for a quick exit (SIGINT/SIGQUIT: quick shutdown, or a code reload)")


def _worker_abort(gworker: Any) -> None:
    cohost = _cohost
    if cohost is None or cohost.pid != os.getpid():
        return
    cohost.report_abort()


# --- the job workers of one gunicorn worker process --------------------------------------------
class CoHost:
    """The job workers of one gunicorn worker process and their shutdown.

    Built by the ``post_worker_init`` hook on the main greenlet. ``state`` goes
    ``starting`` -> ``running`` -> ``draining`` (stop fetching, in-flight jobs may finish)
    -> ``stopped``; ``handing_back`` when gunicorn asked for a quick exit, ``aborted``
    after SIGABRT.
    """

    def __init__(self, settings: Settings, gworker: Any) -> None:
        self.settings = settings
        self.gworker = gworker
        self.pid = os.getpid()
        self.state = "starting"
        self.workers: List[Any] = []
        self.started_at = time.time()
        self.drain_started: Optional[float] = None
        self.deadline: Optional[float] = None
        self.last_tick = time.monotonic()
        self.max_lag = 0.0
        self._lag_window_start = time.monotonic()
        self._drain: Any = None
        self._watcher: Any = None
        self._heartbeat: Any = None
        self._health_client: Any = None
        self._thread_ident: Optional[int] = None
        self._hub: Any = None
        self._abort_snapshot: List[Any] = []

    # -- start ----------------------------------------------------------------------------
    def start(self) -> None:
        """Build and start the workers. Main greenlet of the gunicorn worker process.

        Raises RuntimeError when gevent has not patched the process, ConfigError for a
        processor or plugin that cannot load; either stops the worker from booting.
        """
        import gevent
        from gevent import monkey

        missing = [m for m in ("socket", "threading", "time", "select", "ssl")
                   if not monkey.is_module_patched(m)]
        if missing:
            raise RuntimeError(
                f"echomq_gevent: gunicorn worker {self.pid} is not monkey-patched by gevent "
                f"(not patched: {', '.join(missing)}). Run gunicorn with the gevent worker class "
                f"(-k gevent, or worker_class = 'gevent' in the config file); job greenlets cannot "
                f"share a sync or threaded worker"
            )
        self._hub = gevent.get_hub()
        self._thread_ident = monkey.get_original("threading", "get_ident")()
        self._wire_logging()
        cfg = self.settings.config
        cfg.activate_paths()
        from ..config import build_plugin_host, build_workers

        host, processors = build_plugin_host(cfg, extra=self.settings.extra_plugins)
        self.workers.extend(build_workers(cfg, host, processors, self.settings.redis_url))
        if self.settings.gc_freeze:
            # Everything loaded so far (gunicorn, the app, our modules) lives as long as the
            # process: keep it out of the cyclic collector, so a full collection under job
            # load scans only new objects (measured: 120-260 ms pauses -> under 10 ms).
            gc.collect()
            gc.freeze()
        for w in self.workers:
            w.start()
        specs = {name: q.schedulers for name, q in cfg.queues.items() if q.schedulers}
        if specs:  # the file's job schedulers, upserted unless stored as declared
            from ..schedulers import sync_schedulers

            gevent.spawn(sync_schedulers, self.settings.redis_url, cfg.prefix, specs)
        self.state = "running"
        self._heartbeat = gevent.spawn(self._beat)
        self._watcher = gevent.spawn(self._watch)
        log.info("gunicorn worker %s: job workers started for queue(s) %s on %s (prefix %s)",
                 self.pid, ", ".join(w.queue_name if hasattr(w, "queue_name") else "?" for w in self.workers),
                 _redact(self.settings.redis_url), cfg.prefix)

    def _wire_logging(self) -> None:
        """Send our log records to gunicorn's error log when the app configured none."""
        ours = logging.getLogger("echomq_gevent")
        level = getattr(logging, self.settings.config.log_level.upper(), logging.INFO)
        if ours.level == logging.NOTSET:
            ours.setLevel(level)
        if ours.handlers or logging.getLogger().handlers:
            return
        error_log = getattr(getattr(self.gworker, "log", None), "error_log", None)
        for h in getattr(error_log, "handlers", []):
            ours.addHandler(h)
        ours.propagate = False

    # -- background greenlets -------------------------------------------------------------
    def _beat(self) -> None:
        """Record hub ticks; the gap beyond the sleep is how long something held the hub."""
        import gevent

        period = 0.25
        while self.state not in ("stopped", "aborted"):
            before = time.monotonic()
            gevent.sleep(period)
            now = time.monotonic()
            lag = max(0.0, now - before - period)
            if now - self._lag_window_start > 60:
                self.max_lag, self._lag_window_start = 0.0, now
            self.max_lag = max(self.max_lag, lag)
            self.last_tick = now

    def _watch(self) -> None:
        """Notice gunicorn's shutdown (``alive`` false) and start the drain at once."""
        import gevent

        while self.state == "running" and getattr(self.gworker, "alive", True):
            gevent.sleep(self.settings.poll_interval)
        if self.state == "running":
            self.begin_drain("gunicorn worker is stopping")

    # -- shutdown -------------------------------------------------------------------------
    @property
    def limit(self) -> float:
        """Seconds from the shutdown decision until gunicorn kills this process:
        ``min(graceful_timeout, timeout)`` (``timeout`` 0 means no heartbeat kill)."""
        cfg = getattr(self.gworker, "cfg", None)
        limit = float(getattr(cfg, "graceful_timeout", 30) or 30)
        timeout = float(getattr(cfg, "timeout", 0) or 0)
        return min(limit, timeout) if timeout > 0 else limit

    def budget(self) -> float:
        """Seconds the in-flight jobs may still run once the drain starts:
        ``min(graceful_timeout, timeout) - margin``. The master kills a worker after
        ``graceful_timeout`` (SIGTERM) or ``timeout`` without a heartbeat (recycling,
        HUP); the margin is kept for the hand-back."""
        limit = self.limit
        margin = self.settings.drain_margin
        if margin is None:
            margin = min(2.0, limit / 4)
        return max(0.0, limit - margin)

    def begin_drain(self, reason: str) -> None:
        """Stop fetching everywhere and let in-flight jobs finish within :meth:`budget`;
        each worker hands back what is left when the budget runs out. Returns at once
        (the drain runs in its own greenlet)."""
        import gevent

        if self.state != "running":
            return
        self.state = "draining"
        self.drain_started = time.monotonic()
        budget = self.budget()
        self.deadline = self.drain_started + budget
        log.info("gunicorn worker %s: %s; draining %d in-flight job(s) for up to %.1f s, then "
                 "handing the rest back to wait", self.pid, reason, self.in_flight(), budget)
        self._drain = gevent.spawn(self._close_all, budget)

    def _close_all(self, timeout: float) -> None:
        import gevent

        closers = [gevent.spawn(w.close, timeout=timeout) for w in self.workers]
        gevent.joinall(closers)
        for g in closers:
            if g.exception is not None:
                log.error("closing a job worker failed: %r", g.exception)
        if self.state in ("draining", "handing_back"):
            self.state = "stopped"

    def finish(self) -> None:
        """``worker_exit``: the HTTP side has stopped. Wait for the drain until the
        deadline, hand back what is left, release connections. Main greenlet."""
        if self.state == "aborted":
            self._hand_back_after_abort()
        elif self.state == "running":
            self.begin_drain("gunicorn worker exiting")
        if self._drain is not None and self.deadline is not None:
            # The workers hand back by themselves at the deadline; give them half the margin
            # to do it, then force it with what is left before gunicorn's kill.
            margin = max(0.0, self.limit - self.budget())
            self._drain.join(timeout=max(0.0, self.deadline - time.monotonic()) + margin / 2)
            if not self._drain.dead:
                log.warning("gunicorn worker %s: drain deadline passed; handing back now", self.pid)
                hard_end = (self.drain_started or time.monotonic()) + self.limit - 0.1
                self._hand_back(limit=max(0.2, hard_end - time.monotonic()))
        self.state = "stopped" if self.state != "aborted" else self.state
        for g in (self._watcher, self._heartbeat, self._drain):
            if g is not None and not g.dead:
                g.kill(block=False)
        _close_shared_queues()
        if self._health_client is not None:
            try:
                self._health_client.close()
            except Exception:
                pass
        left = self.in_flight()
        counts = self.counts()
        log.info("gunicorn worker %s: job workers stopped (%d completed, %d handed back, %d still "
                 "in flight)", self.pid, counts.get("completed", 0), counts.get("handed_back", 0), left)

    def _hand_back_after_abort(self) -> None:
        """After SIGABRT: hand back the jobs the workers still track. The job that held
        the hub was unwound by gunicorn's SystemExit and is no longer tracked; it is left
        active on purpose, so the stalled check recovers it once its lock expires and
        counts the stall: a job that always hogs the hub is failed after
        ``max_stalled_count`` instead of killing worker after worker."""
        for w, job in self._abort_snapshot:
            if job.id not in (getattr(w, "active_jobs", None) or {}):
                log.warning("gunicorn worker %s: job %s of queue %r was running when the hub got "
                            "stuck; it stays active and a stalled check will recover it (or fail it "
                            "after max_stalled_count)", self.pid, job.id, getattr(w, "queue_name", "?"))
        self._hand_back(limit=1.0)

    def _hand_back(self, limit: float) -> None:
        import gevent

        closers = [gevent.spawn(w.close, timeout=0) for w in self.workers]
        gevent.joinall(closers, timeout=limit)

    def hand_back_now(self, reason: str) -> None:
        """``worker_int``: hand every in-flight job back to ``wait`` now.

        gunicorn calls it on a greenlet (signals) or, with ``--reload``, from its
        reloader thread; from a foreign thread the work is passed to the hub and this
        waits for it (at most 5 s).
        """
        from gevent import monkey

        get_ident = monkey.get_original("threading", "get_ident")
        if self._thread_ident is not None and get_ident() != self._thread_ident:
            done = monkey.get_original("threading", "Event")()

            def on_hub() -> None:
                import gevent

                def run() -> None:
                    try:
                        self.hand_back_now(reason)
                    finally:
                        done.set()
                gevent.spawn(run)
            self._hub.loop.run_callback_threadsafe(on_hub)
            done.wait(5.0)
            return
        if self.state in ("stopped", "handing_back", "aborted"):
            return
        log.warning("gunicorn worker %s: %s; handing %d in-flight job(s) back to wait", self.pid,
                    reason, self.in_flight())
        self.state = "handing_back"
        if self.drain_started is None:
            self.drain_started = time.monotonic()
            self.deadline = self.drain_started
        self._hand_back(limit=5.0)
        self.state = "stopped"

    def report_abort(self) -> None:
        """``worker_abort``: the master found this process stuck (``timeout``) and sent
        SIGABRT. Log every greenlet's and thread's stack and the jobs in flight; the jobs
        are handed back in ``worker_exit`` if the hub still turns, else a stalled check
        elsewhere recovers them once their locks expire."""
        from gevent.util import format_run_info

        self.state = "aborted"
        self._abort_snapshot = [(w, job) for w in self.workers
                                for job in list((getattr(w, "active_jobs", None) or {}).values())]
        jobs = {getattr(w, "queue_name", "?"): sorted(map(str, _active_ids(w))) for w in self.workers}
        try:
            info = "\n".join(format_run_info())
        except Exception as exc:  # never let the report itself fail the abort
            info = f"(format_run_info failed: {exc!r})"
        log.critical("gunicorn worker %s aborted (timeout: the hub did not turn for %s s). Jobs in "
                     "flight: %s\nWhat every greenlet and thread was doing:\n%s", self.pid,
                     getattr(getattr(self.gworker, "cfg", None), "timeout", "?"), jobs, info)

    # -- health ----------------------------------------------------------------------------
    def counts(self) -> Dict[str, int]:
        """The workers' counters (completed, failed, retried, stalled, lock_lost,
        handed_back) summed over this process's queues."""
        total: Dict[str, int] = {}
        for w in self.workers:
            for k, v in (getattr(w, "counters", None) or {}).items():
                total[k] = total.get(k, 0) + int(v)
        return total

    def in_flight(self) -> int:
        return sum(len(_active_ids(w)) for w in self.workers)

    @property
    def draining(self) -> bool:
        """True from the moment gunicorn decided to stop this process."""
        return self.state != "running" or not getattr(self.gworker, "alive", True)

    def redis_ok(self) -> Optional[str]:
        """``None`` when Redis answers PING within 1 s, else the reason. Request greenlet."""
        if self._health_client is None:
            import redis

            self._health_client = redis.Redis.from_url(
                self.settings.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0,
                max_connections=4, decode_responses=True)
        try:
            self._health_client.ping()
            return None
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    def worker_status(self, w: Any) -> Dict[str, Any]:
        """One job worker's health as plain data (for the JSON bodies)."""
        now = time.time()
        last_fetch = getattr(w, "last_fetch_at", None)
        lock_alive: Any = None
        fn = getattr(w, "lock_thread_alive", None)
        if callable(fn):
            try:
                lock_alive = bool(fn())
            except Exception:
                lock_alive = False
        loop_alive = _loop_alive(w)
        return {
            "running": bool(getattr(w, "running", False)),
            "closing": bool(getattr(w, "closing", False)),
            "active": len(_active_ids(w)),
            "concurrency": getattr(w, "concurrency", None) or getattr(w, "options", {}).get("concurrency"),
            "fetch_loop_alive": loop_alive,
            "last_fetch_age_s": None if not last_fetch else round(max(0.0, now - _as_epoch(last_fetch)), 3),
            "lock_renewal_alive": lock_alive,
        }

    def status(self) -> Dict[str, Any]:
        return {
            "pid": self.pid,
            "state": self.state,
            "draining": self.draining,
            "hub": {"last_tick_age_ms": round((time.monotonic() - self.last_tick) * 1000, 1),
                    "max_lag_ms_60s": round(self.max_lag * 1000, 1),
                    "blocked_for_s": max([_hub_blocked_for(w) for w in self.workers] or [0.0])},
            "queues": {getattr(w, "queue_name", str(i)): self.worker_status(w)
                       for i, w in enumerate(self.workers)},
            "counts": self.counts(),
        }


def _active_ids(w: Any) -> List[Any]:
    jobs = getattr(w, "active_jobs", None) or {}
    try:
        return list(jobs)
    except Exception:
        return []


def _hub_blocked_for(w: Any) -> float:
    fn = getattr(w, "hub_blocked_for", None)
    try:
        return round(float(fn()), 3) if callable(fn) else 0.0
    except Exception:
        return 0.0


def _loop_alive(w: Any) -> Optional[bool]:
    """Whether the worker's fetch loop greenlet still runs (None if we cannot tell)."""
    fn = getattr(w, "fetch_loop_alive", None)
    if callable(fn):
        return bool(fn())
    for attr in ("_run_greenlet", "_greenlet", "_loop_greenlet"):
        g = getattr(w, attr, None)
        if g is not None and hasattr(g, "dead"):
            return not g.dead
    return bool(getattr(w, "running", False))


def _as_epoch(value: Any) -> float:
    """``last_fetch_at`` as epoch seconds, whether the worker stores s, ms or monotonic."""
    v = float(value)
    if v > 1e11:  # milliseconds
        return v / 1000.0
    if v < 1e9:  # monotonic clock
        return time.time() - (time.monotonic() - v)
    return v


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def _close_shared_queues() -> None:
    from . import wsgi

    wsgi.close_queues()

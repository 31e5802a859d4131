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

import glob
import logging
import os
import shutil
import tempfile
from typing import Any, Callable, MutableMapping, Optional, Union

from ..host.config import Config, load_config
from ..errors import ConfigError
from .cohost import CoHost
from .state import PROM_DIR_ENV, Settings, current, process, settings

__all__ = ["install", "current", "CoHost", "Settings", "settings", "PROM_DIR_ENV"]

log = logging.getLogger("echomq_gevent.gunicorn")

_HOOK_MARK = "_echomq_gunicorn_hook"


# --- install ---------------------------------------------------------------------------------
def install(namespace: MutableMapping[str, Any], config: Union[str, Config] = "conf/worker.yaml", *,
            drain_margin: Optional[float] = None, metrics: bool = True,
            poll_interval: float = 0.1, extra_plugins: tuple = (), gc_freeze: bool = True,
            endpoints: bool = True, dashboard: Any = None) -> Settings:
    """Wire the job workers of the YAML file ``config`` into a gunicorn config module.

    Call it from the gunicorn config file, after the file's own hooks, as
    ``install(globals(), config=...)``. A relative ``config`` is looked up in the working
    directory, then beside the gunicorn config file; ``config`` may also be a
    :class:`~echomq_gevent.host.config.Config` already validated (the Django integration's
    ``install`` passes the one made from ``settings.ECHOMQ``). ``drain_margin`` (seconds) is kept
    free at the end of ``graceful_timeout`` for the hand-back (default: 2 s, at most a
    quarter of the budget). ``metrics`` turns on prometheus_client's multiprocess mode
    (a private directory unless ``PROMETHEUS_MULTIPROC_DIR`` is set), so
    ``/_echomq/metrics`` sums every worker process. ``extra_plugins`` are plugin modules
    or objects added after the YAML's. ``gc_freeze`` moves everything loaded before the
    job workers start into the garbage collector's permanent generation
    (``gc.freeze()``), which keeps full collections short while jobs run. ``endpoints``
    wraps the loaded WSGI app in :class:`~echomq_gevent.contrib.wsgi.EchoMQMiddleware`
    (unless it already is), so ``/_echomq/live|ready|metrics`` work without touching the app.
    ``dashboard`` (``True``, a dict of :class:`~echomq_gevent.contrib.dashboard.Dashboard`
    options such as ``{"actions": True, "auth": check}``, or a Dashboard) also serves the
    web dashboard at ``/_echomq/ui/`` through that middleware; read-only unless
    ``actions`` is set.

    Runs in the gunicorn master at config load (again on HUP). Raises ConfigError naming
    the file, line and key when the YAML is wrong, which stops gunicorn before it forks;
    on a HUP a broken file is logged and the previous configuration kept.
    """
    if isinstance(config, Config):  # already validated (the framework integrations' settings)
        path, cfg = config.filename, config
    else:
        path = _resolve_config_path(config, namespace.get("__file__"))
    try:
        cfg = cfg if isinstance(config, Config) else load_config(path)
    except ConfigError as exc:
        if process.settings is None or process.settings.config_path != path:
            raise
        # A HUP re-reads the file: a mistake then must not take the running server down
        # (gunicorn exits when its config file raises); keep what was loaded before.
        log.error("%s; the job workers keep the configuration loaded before (fix the file and "
                  "send HUP again)", exc)
        cfg = process.settings.config
    process.settings = Settings(path, cfg, drain_margin, metrics, poll_interval, tuple(extra_plugins),
                                gc_freeze, endpoints, dashboard)
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
    return process.settings


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
    if os.environ.get(PROM_DIR_ENV):
        os.makedirs(os.environ[PROM_DIR_ENV], exist_ok=True)
        return
    process.owned_prom_dir = tempfile.mkdtemp(prefix="echomq-prometheus-")
    os.environ[PROM_DIR_ENV] = process.owned_prom_dir
    import sys

    if "prometheus_client" in sys.modules:
        log.warning("prometheus_client was imported before install() set %s; metrics of "
                    "this master process are not shared (import it after install())", PROM_DIR_ENV)


def _on_starting(server: Any) -> None:
    """Master, once at start: clear stale metric files, start the embedded Redis."""
    installed = process.settings
    prom_dir = os.environ.get(PROM_DIR_ENV)
    if installed is not None and installed.metrics and prom_dir:
        # child_exit (below) runs inside gunicorn's SIGCHLD handler. Were its import of
        # prometheus_client the first, the next worker's SIGCHLD could interrupt it and the
        # nested child_exit would find the package half imported (ImportError): import it
        # here, once, outside any signal handler.
        from prometheus_client import multiprocess  # noqa: F401

        # prometheus_client's rule: the directory is wiped between runs of the server.
        for f in glob.glob(os.path.join(prom_dir, "*.db")):
            try:
                os.remove(f)
            except OSError:
                pass
    if installed is not None and installed.config.redis.embedded and process.embedded is None:
        process.embedded, process.embedded_url = _start_embedded(installed.config)
        log.info("embedded Redis for the job workers at %s", process.embedded_url)


def _start_embedded(cfg: Config) -> Any:
    """Start (or attach to) the private Redis the YAML asks for; return ``(handle, url)``.

    Started in the master, so every forked worker process shares the one server."""
    from ..host.embedded import EmbeddedRedis

    rs = cfg.redis
    handle = EmbeddedRedis(directory=rs.embedded_dir, port=rs.embedded_port,
                           persist=rs.embedded_persist).start()
    return handle, handle.url


def _child_exit(server: Any, worker: Any) -> None:
    """Master, after a worker process ended: drop its live gauges from the metric files."""
    if process.settings is None or not process.settings.metrics or not os.environ.get(PROM_DIR_ENV):
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def _on_exit(server: Any) -> None:
    """Master, at exit: stop the embedded Redis, remove the metrics directory we made."""
    if process.embedded is not None:
        try:
            process.embedded.stop()
        finally:
            process.embedded = None
            process.embedded_url = None
    owned = process.owned_prom_dir
    if owned and os.environ.get(PROM_DIR_ENV) == owned:
        shutil.rmtree(owned, ignore_errors=True)
        process.owned_prom_dir = None


# --- worker-side hooks ------------------------------------------------------------------------
def _post_worker_init(gworker: Any) -> None:
    installed = process.settings
    if installed is None:
        raise ConfigError("echomq_gevent.contrib.gunicorn: install() has not run in this process tree; "
                          "call install(globals(), config=...) in the gunicorn config file")
    cohost = CoHost(installed, gworker)
    process.cohost = cohost
    cohost.start()
    if getattr(gworker, "wsgi", None) is not None:
        from .wsgi import EchoMQMiddleware

        if isinstance(gworker.wsgi, EchoMQMiddleware):
            # the app wrapped itself: it still gets the dashboard install() asked for
            if installed.dashboard and gworker.wsgi._dashboard_spec is None:
                gworker.wsgi.use_dashboard(installed.dashboard)
        elif installed.endpoints:
            # the app was loaded just before this hook; the HTTP server starts after it
            gworker.wsgi = EchoMQMiddleware(gworker.wsgi, dashboard=installed.dashboard)


def _worker_exit(server: Any, gworker: Any) -> None:
    # gunicorn also calls worker_exit in the master for a worker that vanished; only the
    # worker process itself has a CoHost.
    cohost = process.cohost
    if cohost is None or cohost.pid != os.getpid():
        return
    cohost.finish()


def _worker_int(gworker: Any) -> None:
    cohost = process.cohost
    if cohost is None or cohost.pid != os.getpid():
        return
    cohost.hand_back_now("gunicorn asked for a quick exit (SIGINT/SIGQUIT: quick shutdown, or a code reload)")


def _worker_abort(gworker: Any) -> None:
    cohost = process.cohost
    if cohost is None or cohost.pid != os.getpid():
        return
    cohost.report_abort()

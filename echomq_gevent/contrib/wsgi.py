"""WSGI side of the gunicorn co-hosting: health and metrics endpoints, and the shared
``Queue`` request handlers enqueue with.

Wrap any WSGI app (Flask, Django, Pyramid, a bare function)::

    from echomq_gevent.contrib.wsgi import EchoMQMiddleware, get_queue
    application = EchoMQMiddleware(application)

    def handler(...):
        get_queue("mail").add("welcome", {"to": "a@example.com"})

The middleware answers three paths itself and passes everything else to the app:

``/_echomq/live``
    200 while the hub turns (a heartbeat greenlet ticked recently) and every running
    job worker's lock-renewal thread is alive; else 503. Restart the process on 503.
``/_echomq/ready``
    200 while Redis answers PING, every job worker's fetch loop runs, the process
    is not draining (gunicorn decided to stop it) and no outbox's oldest waiting row
    is older than its ``max_age``; else 503. Take it out of rotation on 503.
``/_echomq/metrics``
    Prometheus text. With ``PROMETHEUS_MULTIPROC_DIR`` set (``install()`` sets it) the
    counters of every gunicorn worker process, live or recycled, are summed, so any
    worker answers for the whole pool.

Bodies of ``live`` and ``ready`` are JSON with the details (state, per-queue
``active``/``concurrency``, hub lag, counts).

With ``dashboard=`` the middleware also serves the web dashboard
(:mod:`echomq_gevent.contrib.dashboard`) under ``/_echomq/ui/``: pass a
:class:`~echomq_gevent.contrib.dashboard.Dashboard`, or ``True`` / a dict of its options
(``actions``, ``auth``, ``queues``...) to build one per process on the Redis and prefix
of the YAML that ``install()`` loaded.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from .state import current, process, settings

__all__ = ["EchoMQMiddleware", "get_queue", "close_queues", "render_metrics", "DEFAULT_POOL_SIZE"]

#: Connections in each process's shared pool for enqueueing (see :func:`get_queue`).
DEFAULT_POOL_SIZE = 50

#: A hub whose heartbeat has not ticked for this long is reported not live.
LIVE_HUB_STALL_S = 5.0

StartResponse = Callable[..., Any]


class EchoMQMiddleware:
    """WSGI middleware serving ``{path_prefix}/live``, ``/ready`` and ``/metrics``.

    Runs on request greenlets; every answer is computed from in-process state except
    ``ready``'s Redis PING (1 s timeout). ``cohost`` defaults to this gunicorn worker
    process's :func:`echomq_gevent.contrib.state.current` (looked up per request, so
    the middleware can wrap the app before the workers start, e.g. with ``preload_app``).
    Without job workers in the process, ``live`` and ``ready`` answer 503 and say why.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], path_prefix: str = "/_echomq",
                 cohost: Any = None, dashboard: Any = None) -> None:
        self.app = app
        self.path_prefix = path_prefix.rstrip("/")
        self._cohost = cohost
        self._dashboard_spec: Any = None
        self._dashboard: Any = None
        self._dashboard_pid: Optional[int] = None
        self.use_dashboard(dashboard)
        self.ui_prefix = self.path_prefix + "/ui"
        self._routes: Dict[str, Callable[[], Tuple[str, List[Tuple[str, str]], bytes]]] = {
            self.path_prefix + "/live": self.live,
            self.path_prefix + "/ready": self.ready,
            self.path_prefix + "/metrics": self.metrics,
        }

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if self._dashboard_spec is not None and (path == self.ui_prefix or path.startswith(self.ui_prefix + "/")):
            inner = dict(environ)
            inner["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "").rstrip("/") + self.ui_prefix
            inner["PATH_INFO"] = path[len(self.ui_prefix):] or "/"
            return self.dashboard()(inner, start_response)
        route = self._routes.get(path)
        if route is None:
            return self.app(environ, start_response)
        status, headers, body = route()
        headers = headers + [("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
        start_response(status, headers)
        return [body] if environ.get("REQUEST_METHOD", "GET") != "HEAD" else [b""]

    def use_dashboard(self, dashboard: Any) -> None:
        """Serve ``dashboard`` (a Dashboard, ``True`` or a dict of its options; ``None`` or
        ``False``: none) under ``/_echomq/ui/``. The gunicorn integration calls it on an app
        that wrapped itself in this middleware when ``install(dashboard=...)`` asks for one."""
        if dashboard is not None and not isinstance(dashboard, (bool, dict)) and not callable(dashboard):
            raise TypeError(f"dashboard must be a Dashboard (any WSGI app), True or a dict of its options, "
                            f"got {dashboard!r}")
        self._dashboard_spec = dashboard or None
        self._dashboard = None

    def dashboard(self) -> Any:
        """The dashboard app; one built from options is made once per process (after a fork
        the parent's connections are not reused)."""
        spec = self._dashboard_spec
        if not isinstance(spec, (bool, dict)):
            return spec
        if self._dashboard is None or self._dashboard_pid != os.getpid():
            from .dashboard import Dashboard

            options = dict(spec) if isinstance(spec, dict) else {}
            url, prefix = _defaults(options.pop("connection", None), options.pop("prefix", None))
            s = settings()
            if s is not None and "queues" not in options:
                options.setdefault("known_queues", list(s.config.queues))
            self._dashboard = Dashboard(url, prefix=prefix, **options)
            self._dashboard_pid = os.getpid()
        return self._dashboard

    def cohost(self) -> Any:
        if self._cohost is not None:
            return self._cohost
        return current()

    # -- endpoints ----------------------------------------------------------------------
    def live(self) -> Tuple[str, List[Tuple[str, str]], bytes]:
        """200 when the hub turns and lock renewal runs for every running worker."""
        host = self.cohost()
        if host is None:
            return _json(503, {"live": False, "reason": "no job workers in this process "
                                                        "(install() did not run or post_worker_init failed)"})
        status = host.status()
        problems = []
        if status["hub"]["last_tick_age_ms"] > LIVE_HUB_STALL_S * 1000:
            problems.append("hub heartbeat stalled for %.1f s" % (status["hub"]["last_tick_age_ms"] / 1000))
        for name, q in status["queues"].items():
            if q["running"] and not q["closing"] and q["lock_renewal_alive"] is False:
                problems.append(f"queue {name}: lock-renewal thread is dead")
        status["live"] = not problems
        if problems:
            status["reason"] = "; ".join(problems)
        return _json(200 if not problems else 503, status)

    def ready(self) -> Tuple[str, List[Tuple[str, str]], bytes]:
        """200 when Redis answers, every fetch loop runs and the process is not draining."""
        host = self.cohost()
        if host is None:
            return _json(503, {"ready": False, "reason": "no job workers in this process"})
        status = host.status()
        problems = []
        if status["draining"]:
            problems.append(f"draining ({status['state']}): gunicorn is stopping this worker")
        else:
            err = host.redis_ok()
            if err:
                problems.append(f"Redis unreachable: {err}")
            for name, q in status["queues"].items():
                if not q["running"] or q["closing"]:
                    problems.append(f"queue {name}: worker not running")
                elif q["fetch_loop_alive"] is False:
                    problems.append(f"queue {name}: fetch loop is dead")
            for box in status.get("outbox") or []:
                if box.get("too_old"):
                    problems.append(f"{box.get('app')}: the oldest row has waited {box['oldest_age_s']:.1f} s "
                                    f"(max_age {box['max_age_s']:g} s)")
        status["ready"] = not problems
        if problems:
            status["reason"] = "; ".join(problems)
        return _json(200 if not problems else 503, status)

    def metrics(self) -> Tuple[str, List[Tuple[str, str]], bytes]:
        body, content_type = render_metrics()
        return "200 OK", [("Content-Type", content_type)], body


def render_metrics() -> Tuple[bytes, str]:
    """Prometheus exposition of this process tree's metrics.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, every process's files are merged
    (prometheus_client's multiprocess collector), so the answer is the same whichever
    gunicorn worker serves it; without it, this process's default registry. With the
    Prometheus plugin loaded, the queues' gauges of this process's workers are added
    (:mod:`echomq_gevent.host.queue_gauges`): read from Redis by the process that answers.
    """
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    from ..host.queue_gauges import process_gauges

    gauges = process_gauges()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        if gauges.queues:  # read from Redis by this process only, the one answering
            registry.register(gauges)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    if gauges.queues:
        gauges.register_on(REGISTRY)
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def _json(code: int, payload: Dict[str, Any]) -> Tuple[str, List[Tuple[str, str]], bytes]:
    status = "200 OK" if code == 200 else "503 Service Unavailable"
    return status, [("Content-Type", "application/json")], json.dumps(payload, default=str).encode()


# --- the shared queue ------------------------------------------------------------------------
def get_queue(name: str, connection: Optional[str] = None, prefix: Optional[str] = None,
              pool_size: int = DEFAULT_POOL_SIZE, pool_timeout: float = 5.0, plugins: Any = None) -> Any:
    """The one :class:`~echomq_gevent.queue.Queue` for ``name`` in this process, shared by
    every request greenlet. ``plugins`` (a :class:`~echomq_gevent.plugins.PluginHost`, e.g.
    ``echomq_gevent.contrib.otel.producer_plugins()``) is given to the queue when it has none.

    ``connection`` and ``prefix`` default to the YAML that ``install()`` loaded, so the
    app enqueues where the job workers fetch. The queue's client uses a
    ``BlockingConnectionPool`` of ``pool_size`` connections: each request greenlet that
    enqueues borrows one for a round trip; when all are busy the next greenlet waits up
    to ``pool_timeout`` seconds instead of opening connection after connection (a plain
    pool grows to one connection per concurrent greenlet, thousands under
    ``worker_connections``). With a ``redis+sentinel://`` URL the client is the sentinels'
    pool, which follows a failover but does not wait: it opens a connection per
    concurrent greenlet. Safe with ``preload_app``: a queue made before the fork is
    never reused in a child (each process builds its own).
    """
    pid = os.getpid()
    if process.queues_pid != pid:
        process.queues.clear()  # inherited across fork: the sockets belong to the parent
        process.queues_pid = pid
    url, prefix = _defaults(connection, prefix)
    key = (name, url, prefix)
    queue = process.queues.get(key)
    if queue is None:
        import redis

        from ..connection.clients import url_settings
        from ..queue.queue import Queue

        # the socket timeouts, keep-alive and health checks of every client we create
        from ..connection.cluster import CLUSTER_SCHEME, CLUSTER_TLS_SCHEME
        from ..connection.clients import SENTINEL_SCHEME, make_client

        if url.startswith((SENTINEL_SCHEME + "://", CLUSTER_SCHEME + "://", CLUSTER_TLS_SCHEME + "://")):
            # the sentinels' pool follows failovers, a cluster client its slots; they grow
            client = make_client(url)
        else:
            client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
                url, max_connections=pool_size, timeout=pool_timeout, decode_responses=True,
                **url_settings(url)))
        queue = Queue(name, connection=client, prefix=prefix)
        process.queues[key] = queue
    if plugins is not None and queue.plugins is None:
        queue.plugins = plugins
    return queue


def _defaults(connection: Optional[str], prefix: Optional[str]) -> Tuple[str, str]:
    s = settings()
    if connection is None:
        if s is None:
            raise ValueError("get_queue: pass connection='redis://...' (no install() has loaded a "
                             "YAML file in this process to take the Redis URL from)")
        connection = s.redis_url
    if prefix is None:
        prefix = s.prefix if s is not None else "bull"
    return connection, prefix


def close_queues() -> None:
    """Close this process's shared queues (``worker_exit`` calls it)."""
    if process.queues_pid != os.getpid():
        process.queues.clear()
        return
    for q in list(process.queues.values()):
        try:
            q.close()
            pool = getattr(q.client, "connection_pool", None)
            if pool is not None:
                pool.disconnect()  # the pool is ours, not the Queue's
            else:  # a cluster client
                q.client.close()
        except Exception:
            pass
    process.queues.clear()

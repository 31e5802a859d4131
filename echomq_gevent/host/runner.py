"""One object that runs the workers of a YAML config in this process.

``echomq-gevent -c FILE`` (:mod:`echomq_gevent.host.cli`) and gunicorn's gevent workers
(:mod:`echomq_gevent.contrib.gunicorn`) both run a config the same way, through
:class:`Runner`:

1. **build**: the plugin host (the YAML's plugins, entry points, extra plugins) and one
   :class:`~echomq_gevent.worker.Worker` per queue, all sharing the host;
2. **start**: each worker runs on its own greenlet of the current hub, and the job
   schedulers the file declares are written to Redis (unless stored as declared);
3. **drain**: every worker stops fetching; in-flight jobs may finish within a timeout;
4. **hand back**: what is still running goes back to the front of ``wait``
   (``moveJobFromActiveToWait``) so another process takes it at once;
5. **health**: each worker's typed :meth:`~echomq_gevent.worker.Worker.health`, the
   summed counters, the jobs in flight.

What differs stays with the caller: the command owns the process' signals
(:meth:`Runner.handle_signals`), its progress line and the demo producer; the gunicorn
integration reacts to gunicorn's hooks, budgets the drain by gunicorn's timeouts and
serves the health endpoints.
"""
from __future__ import annotations

import importlib
import logging
import re
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gevent
import gevent.event

from .config import Config
from ..errors import ConfigError, WorkerStateError
from ..worker.signals import ShutdownSignals

log = logging.getLogger("echomq_gevent.runner")

__all__ = ["Runner", "build_plugin_host", "build_workers", "resolve_processor", "sync_schedulers"]


class Runner:
    """The workers of one config in this process, from build to hand-back.

    ``state`` goes ``built`` -> ``running`` -> ``draining`` (no new jobs; in-flight jobs
    may finish) -> ``stopped``; ``handing_back`` while unfinished jobs are given back at
    once. Every method runs on the hub the workers live on (main thread).

    ``host``/``processors`` default to :func:`build_plugin_host` of
    ``cfg`` with ``extra_plugins``; ``url`` is the Redis the workers use (the embedded
    server's URL when the config asks for one and the caller started it).
    """

    def __init__(self, cfg: Config, url: str, extra_plugins: Sequence[Any] = (),
                 host: Any = None, processors: Optional[Mapping[str, Optional[Callable[..., Any]]]] = None) -> None:
        self.cfg = cfg
        self.url = url
        if host is None:
            host, processors = build_plugin_host(cfg, tuple(extra_plugins))
        self.host = host
        self.processors: Mapping[str, Optional[Callable[..., Any]]] = processors or {}
        self.workers: List[Any]
        self.workers, self.shared = build_shared_workers(cfg, host, self.processors, url)
        #: the watchers of the pools (worker/pool/watch.py): the queues their patterns find,
        #: their declared queues obliterated and made again
        self.families = build_families(cfg, host, self.shared, self._add_worker, self._drop_worker,
                                       self.workers, self.processors)
        self.state = "built"
        #: True once a worker stopped with an error (the command exits 1)
        self.failed = False
        self._runs: List[gevent.Greenlet] = []
        self._closers: List[gevent.Greenlet] = []
        self._signals: Optional[ShutdownSignals] = None
        #: helpers that run beside the workers (the schedulers' sync)
        self._side: List[gevent.Greenlet] = []
        #: set when the workers start stopping (a drain or a hand-back began)
        self.stopping_event = gevent.event.Event()

    @property
    def queue_names(self) -> List[str]:
        return [w.queue_name for w in self.workers]

    # -- running -----------------------------------------------------------------------
    def start(self) -> None:
        """Start every worker on its own greenlet; returns at once."""
        if self.state != "built":
            raise WorkerStateError(f"Runner.start: the workers were started already (state {self.state!r})")
        self._runs = [gevent.spawn(self._run_one, w) for w in self.workers]
        for family in self.families:
            self._side.append(gevent.spawn(family.run, self.stopping_event))
        specs = {name: q.schedulers for name, q in self.cfg.queues.items() if q.schedulers}
        if specs:  # the file's job schedulers, upserted unless stored as declared
            self._side.append(gevent.spawn(sync_schedulers, self.url, self.cfg.prefix, specs,
                                           self.stopping_event))
        self.state = "running"

    def _add_worker(self, worker: Any) -> None:
        """A queue a pool's pattern found, or a pool's declared queue back after it was
        obliterated: run its worker beside the others (not once the workers are stopping)."""
        if self.stopping or self.state != "running":
            return
        self.workers.append(worker)
        self._runs.append(gevent.spawn(self._run_one, worker))

    def _drop_worker(self, worker: Any) -> None:
        """A pool's queue is gone (obliterated): close its worker (nothing else stops)."""
        if worker in self.workers:
            self.workers.remove(worker)
        gevent.spawn(self._close_one, worker, 0, "queue gone")

    def _run_one(self, worker: Any) -> None:
        try:
            worker.run()
        except Exception:
            self.failed = True
            log.exception("the worker of queue %r stopped with an error", worker.queue_name)
            if not self.stopping:
                self.drain(None, "error")

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until every worker has stopped and every close begun has ended (or
        ``timeout`` s); True when they have."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.families and not self.stopping_event.wait(timeout):
            return False  # workers come and go with the queues found: it runs until stopped
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done = gevent.joinall(self._runs, timeout=left)
        if len(done) != len(self._runs):
            return False
        closers = list(self._closers)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return len(gevent.joinall(closers, timeout=left)) == len(closers)

    def handle_signals(self) -> bool:
        """Take SIGTERM/SIGINT for these workers (main greenlet of the main thread only):
        the first drains with each worker's ``shutdown_timeout``, a second hands back at
        once. False when not on the main greenlet."""
        self._signals = ShutdownSignals(self._graceful_signal, self._urgent_signal)
        return self._signals.install()

    def _graceful_signal(self, signame: str) -> None:
        log.info("%s: stopping; in-flight jobs finish or are handed back to wait", signame)
        self.drain(None, "signal")

    def _urgent_signal(self, signame: str) -> None:
        log.warning("%s again: handing unfinished jobs back now", signame)
        self.drain(0, "signal")

    # -- stopping ----------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self.state in ("draining", "handing_back", "stopped")

    def drain(self, timeout: Optional[float] = None, reason: str = "close") -> gevent.Greenlet:
        """Close every worker: stop fetching, let in-flight jobs run for up to ``timeout`` s
        (``None``: each worker's ``shutdown_timeout``; ``0``: hand back now), hand the rest
        back. Returns at once with the greenlet doing it. A later call with a shorter
        timeout shortens the wait of the one in progress."""
        self.stopping_event.set()
        if self.state in ("built", "running"):
            self.state = "draining" if timeout is None or timeout > 0 else "handing_back"
        elif timeout is not None and timeout <= 0 and self.state == "draining":
            self.state = "handing_back"
        closer = gevent.spawn(self._close_all, timeout, reason)
        self._closers.append(closer)
        return closer

    def _close_all(self, timeout: Optional[float], reason: str) -> None:
        closers = [gevent.spawn(self._close_one, w, timeout, reason) for w in self.workers]
        gevent.joinall(closers)
        if all(w.closed for w in self.workers):
            self.shared.close()  # the workers' shared client and marker wait, last
            self.state = "stopped"

    @staticmethod
    def _close_one(worker: Any, timeout: Optional[float], reason: str) -> None:
        try:
            worker.close(timeout=timeout, reason=reason)
        except Exception:
            log.exception("closing the worker of queue %r failed", worker.queue_name)

    def hand_back(self, limit: float = 5.0, reason: str = "close") -> bool:
        """Hand every unfinished job back now and wait up to ``limit`` s for it; True
        when every worker has closed."""
        closer = self.drain(0, reason)
        closer.join(timeout=limit)
        return closer.dead

    def stop_handling_signals(self) -> None:
        if self._signals is not None:
            self._signals.cancel()
            self._signals = None

    # -- health ------------------------------------------------------------------------
    def health(self) -> List[Any]:
        """Each worker's :class:`~echomq_gevent.worker.WorkerHealth`, in queue order."""
        return [w.health() for w in self.workers]

    def counts(self) -> Dict[str, int]:
        """The workers' counters (completed, failed, retried, stalled, lock_lost,
        handed_back) summed over the queues."""
        total: Dict[str, int] = {}
        for w in self.workers:
            for k, v in w.counters.items():
                total[k] = total.get(k, 0) + int(v)
        return total

    def in_flight(self) -> int:
        return sum(len(w.active_jobs) for w in self.workers)

    def active(self) -> List[Any]:
        """``(worker, job)`` for every job in flight."""
        return [(w, job) for w in self.workers for job in list(w.active_jobs.values())]


def sync_schedulers(url: str, prefix: str, specs: Mapping[str, Mapping[str, Mapping[str, Any]]],
                    stop: Optional[Any] = None, retry_s: float = 2.0) -> None:
    """Bring the schedulers a configuration declares into Redis: ``specs[queue][id]`` is
    ``{"repeat": ..., "template": ...}``. Called by :meth:`Runner.start` on its own greenlet; retries while Redis cannot be reached (until ``stop`` is set), logs
    and skips a scheduler Redis refuses."""
    import redis

    from ..errors import EchoMQError
    from ..queue.queue import Queue
    from ..queue.schedulers import ensure_job_scheduler

    for queue_name, schedulers in specs.items():
        if not schedulers:
            continue
        queue = Queue(queue_name, connection=url, prefix=prefix)
        try:
            for scheduler_id, spec in schedulers.items():
                while True:
                    try:
                        outcome = ensure_job_scheduler(queue, scheduler_id, spec.get("repeat") or {},
                                                       spec.get("template"))
                        log.info("queue %r: job scheduler %r %s", queue_name, scheduler_id, outcome)
                        break
                    except (redis.ConnectionError, redis.TimeoutError) as exc:
                        log.warning("queue %r: job scheduler %r not written yet (%s); retrying in %.0f s",
                                    queue_name, scheduler_id, exc, retry_s)
                        if stop is not None and stop.wait(retry_s):
                            return
                        if stop is None:
                            gevent.sleep(retry_s)
                    except (EchoMQError, ValueError, redis.ResponseError) as exc:
                        log.error("queue %r: job scheduler %r cannot be written: %s", queue_name, scheduler_id,
                                  exc)
                        break
        finally:
            queue.close()


# --- resolving what the file names ------------------------------------------------------------
def resolve_processor(spec: str) -> Callable[..., Any]:
    """Import ``"module:function"`` (the function may be dotted: ``mod:Class.method``).

    Raises ImportError/AttributeError/TypeError with a message naming the spec.
    """
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"processor {spec!r}: module {module_name!r} cannot be imported: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"processor {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not callable(obj):
        raise TypeError(f"processor {spec!r} is not callable: {obj!r}")
    return obj


def _plugin_object(spec: str) -> Any:
    from ..plugins.host import import_plugin_module

    module_name, _, attr = spec.partition(":")
    obj: Any = import_plugin_module(module_name)
    if attr:
        for part in attr.split("."):
            obj = getattr(obj, part)
    return obj


def build_plugin_host(cfg: Config, extra: Tuple[Any, ...] = (), check_processors: bool = True) -> Tuple[
        Any, Dict[str, Optional[Callable[..., Any]]]]:
    """Load the file's plugins (and entry points), build the shared PluginHost and
    resolve every queue's processor.

    Called by the CLI (run and ``--check``) and the gunicorn integration, on the main
    greenlet, after :meth:`Config.activate_paths`. ``extra`` are plugin objects or
    module names added after the file's (the CLI's ``--demo`` and progress plugins).
    Returns ``(host, processors)``, ``processors[queue]`` being the callable from
    ``processor:`` or ``None`` (the plugins route by job name). Raises ConfigError naming
    the line of the plugin or processor that fails, or of a queue nothing can serve.
    """
    import pluggy

    from ..plugins.host import PluginHost, make_plugin_manager

    objects: List[Any] = []
    for i, spec in enumerate(cfg.plugins):
        try:
            objects.append(_plugin_object(spec))
        except ImportError as exc:
            raise cfg.error(("plugins", i), f"plugin module {spec!r} cannot be imported: {exc}; "
                                            f"check the name and plugin_paths") from None
        except AttributeError as exc:
            raise cfg.error(("plugins", i), f"plugin {spec!r}: {exc}") from None
    try:
        # an object named ``module:object`` is registered (and listed by --check) by that name
        named = [(spec, obj) if ":" in spec else obj for spec, obj in zip(cfg.plugins, objects)]
        pm = make_plugin_manager(named + list(extra), entry_points=cfg.entry_points)
    except pluggy.PluginValidationError as exc:
        raise _invalid_plugin(cfg, objects, exc) from None
    except ImportError as exc:  # an installed entry-point plugin that fails to load
        raise cfg.error(("entry_points",), f"{exc} (or set entry_points: false)") from None
    try:
        host = PluginHost(pm)
    except Exception as exc:
        raise cfg.error(("plugins",), f"a plugin's echomq_register_processors raised "
                                      f"{type(exc).__name__}: {exc}") from None
    processors: Dict[str, Optional[Callable[..., Any]]] = {}
    dynamic = [impl for impl in pm.hook.echomq_get_processor.get_hookimpls()]
    routed = {q for (q, _n) in host.registry.routes()}
    for name, q in cfg.queues.items():
        if q.processor:
            try:
                processors[name] = resolve_processor(q.processor)
            except (ImportError, AttributeError, TypeError) as exc:
                raise cfg.error(("queues", name, "processor"), str(exc)) from None
            if check_processors:
                _check_ledger(cfg, name, processors[name])
            continue
        processors[name] = None
        if check_processors and name not in routed and not dynamic:
            raise cfg.error(("queues", name),
                            f"queue {name!r} has no processor: set processor: 'module:function' or "
                            f"load a plugin (plugins: [...]) that registers one for it")
    for pool in cfg.pools.values():  # the processor of the queues a pool's pattern finds
        if pool.processor:
            try:
                resolve_processor(pool.processor)
            except (ImportError, AttributeError, TypeError) as exc:
                raise cfg.error(("pools", pool.name, "processor"), str(exc)) from None
    return host, processors


def _check_ledger(cfg: Config, queue: str, fn: Any) -> None:
    """A processor named by ``processor:`` and marked atomic (an integration's effect
    ledger: it has ``echomq_ledgered`` and a ``check()``) is checked as the integration
    checks its declared ones: its database configured, the ledger's table there.
    ConfigError at the line of ``processor:``."""
    if not getattr(fn, "echomq_ledgered", False) or not callable(getattr(fn, "check", None)):
        return
    try:
        fn.check()
    except ConfigError as exc:
        raise cfg.error(("queues", queue, "processor"), str(exc)) from None


def _invalid_plugin(cfg: Config, objects: Sequence[Any], exc: Exception) -> Exception:
    """The ConfigError for a plugin pluggy refuses (a hook no spec knows): at the line of
    the ``plugins:`` entry that names it, with the nearest hook name for a typo."""
    import difflib

    from ..plugins import hookspecs

    plugin = getattr(exc, "plugin", None)
    index = next((i for i, obj in enumerate(objects) if obj is plugin), None)
    at: Tuple[Any, ...] = ("plugins", index) if index is not None else ("plugins",)
    name = repr(cfg.plugins[index]) if index is not None else repr(plugin)
    message = f"plugin {name} is not valid: {exc}"
    hook = re.search(r"unknown hook '(\w+)'", str(exc))
    if hook:
        known = [n for n in dir(hookspecs) if n.startswith("echomq_")]
        near = difflib.get_close_matches(hook.group(1), known, n=1)
        message = (f"plugin {name} implements {hook.group(1)!r}, a hook that does not exist"
                   + (f"; did you mean {near[0]!r}?" if near else f"; the hooks are {', '.join(known)}"))
    return cfg.error(at, message)


def build_workers(cfg: Config, host: Any, processors: Mapping[str, Optional[Callable[..., Any]]],
                  url: str) -> List[Any]:
    """One :class:`~echomq_gevent.worker.Worker` per queue of the file, all sharing ``host``.

    Called by the CLI and the gunicorn integration after :func:`build_plugin_host`, on the
    hub the workers will run on; nothing talks to Redis until a worker runs.
    """
    return build_shared_workers(cfg, host, processors, url)[0]


class SharedConnections:
    """What the workers of one process share on their Redis: one command client (its
    script connection pipelined for all of them) and, with ``marker_wait: shared`` or
    pools, one marker wait; ``budgets``: each pool's budget by pool name. The runner owns
    them and closes them once every worker has closed."""

    def __init__(self, client: Any, marker_wait: Any = None, budgets: Optional[Dict[str, Any]] = None) -> None:
        self.client = client
        self.marker_wait = marker_wait
        self.budgets: Dict[str, Any] = dict(budgets or {})

    def close(self) -> None:
        from ..connection.clients import close_client

        if self.marker_wait is not None:
            try:
                self.marker_wait.close()
            except Exception:  # pragma: no cover - best effort
                log.debug("closing the shared marker wait failed", exc_info=True)
        try:
            close_client(self.client)
        except Exception:  # pragma: no cover - best effort
            pass


def build_shared_workers(cfg: Config, host: Any, processors: Mapping[str, Optional[Callable[..., Any]]],
                         url: str) -> Tuple[List[Any], SharedConnections]:
    """:func:`build_workers`, and what they share: one command client for the process
    (per Redis and connection settings: the file has one of each) and, with
    ``marker_wait: shared``, one marker wait (on a Redis Cluster each queue keeps its own,
    since the keys of one ``BZPOPMIN`` must share a slot)."""
    from ..connection.clients import make_client
    from ..connection.cluster import is_cluster
    from ..worker.pool import PoolBudget
    from ..worker.shared_wait import SharedMarkerWait
    from ..worker.worker import Worker

    client = make_client(url, settings=cfg.redis.connection)
    # the pools of the file, over the queues this process runs (a selection may leave some out)
    budgets: Dict[str, Any] = {}
    by_pool: Dict[str, Any] = {}
    for pool in cfg.pools.values():
        members = [q for q in pool.queues if q in cfg.queues]
        if members or pool.patterns:
            budget = by_pool[pool.name] = PoolBudget(pool.concurrency, pool.order, pool.weights, name=pool.name,
                                                     queues=pool.queues + pool.patterns, turn=pool.turn)
            budgets.update((q, budget) for q in members)
    marker_wait = None
    if cfg.marker_wait == "shared" or by_pool:
        if is_cluster(client):
            log.info("marker_wait: shared is not used on a Redis Cluster; each queue waits on its own primary")
        else:  # a pool's queues wait in one shared wait, whatever marker_wait says
            marker_wait = SharedMarkerWait(client, cfg.redis.connection)
    shared_for_all = cfg.marker_wait == "shared"
    workers = [Worker(name, processor=processors.get(name), connection=client, prefix=cfg.prefix,
                      plugins=host, connection_settings=cfg.redis.connection,
                      marker_wait=marker_wait if shared_for_all or name in budgets else None,
                      pool=budgets.get(name), **q.options)
               for name, q in cfg.queues.items()]
    return workers, SharedConnections(client, marker_wait, by_pool)


def build_families(cfg: Config, host: Any, shared: SharedConnections, add: Callable[[Any], None],
                   drop: Callable[[Any], None], workers: Sequence[Any] = (),
                   processors: Optional[Mapping[str, Optional[Callable[..., Any]]]] = None) -> List[Any]:
    """A :class:`~echomq_gevent.worker.pool.watch.PoolWatcher` for each pool of the file:
    the queues its patterns find get a Worker of the pool, built here, and its declared
    queues (``workers``, the runner's) are dropped when obliterated and served again when
    a job is added to them. Raises ConfigError at the pool's ``processor`` when it cannot
    be imported."""
    from ..worker.pool.watch import PoolWatcher, weight_for
    from ..worker.worker import Worker

    watchers: List[Any] = []
    claimed: set = set()
    by_name = {w.queue_name: w for w in workers}
    for pool in cfg.pools.values():
        budget = shared.budgets.get(pool.name)
        if budget is None:
            continue  # none of its queues runs in this process
        processor = None
        if pool.processor:
            try:
                processor = resolve_processor(pool.processor)
            except (ImportError, AttributeError, TypeError) as exc:
                raise cfg.error(("pools", pool.name, "processor"), str(exc)) from None

        def make(name: str, pattern: Optional[str], pool: Any = pool, processor: Any = processor,
                 budget: Any = budget) -> Any:
            if pattern is None:  # a declared queue, back after it was obliterated
                q = cfg.queues[name]
                return Worker(name, processor=(processors or {}).get(name), connection=shared.client,
                              prefix=cfg.prefix, plugins=host, connection_settings=cfg.redis.connection,
                              marker_wait=shared.marker_wait, pool=budget, **q.options)
            weight = weight_for(pool.weights, name, pattern)
            if weight is not None:
                budget.weights[name] = weight
            return Worker(name, processor=processor, connection=shared.client, prefix=cfg.prefix, plugins=host,
                          connection_settings=cfg.redis.connection, marker_wait=shared.marker_wait, pool=budget,
                          **pool.family_options)

        declared = {q: by_name[q] for q in pool.queues if q in by_name}
        watchers.append(PoolWatcher(pool.name, shared.client, cfg.prefix, pool.patterns, make, add, drop,
                                    excluded=cfg.queues, claimed=claimed, declared=declared,
                                    every=pool.discover_every))
    return watchers

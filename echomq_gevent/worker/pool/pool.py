"""A pool: several queues served by one process from one concurrency budget.

:class:`Pool` is the Python face of ``pools:`` in the YAML file. It is a set of
:class:`~echomq_gevent.worker.Worker` objects, one per queue, that share:

* one :class:`~.budget.PoolBudget`: ``concurrency`` slots handed to the queues that
  have work, in the pool's ``order`` (``strict``, ``weighted``, ``round_robin``); a queue's
  own ``concurrency`` is its cap inside the pool;
* one command client (its pipelined script connection), one marker wait
  (:mod:`..shared_wait`) and one lock-renewal thread and connection (:mod:`..shared_locks`),
  so the connections do not grow with the number of queues.

Each queue keeps its own options: processor, limiter, offload, ``job_timeout``,
``remove_on_*``... A Pool is a set of workers rather than one worker over several queues
because that is what a queue's options already are: every per-queue part (the limiter,
the offload runtime, the stalled check, the retry rules, a worker's name in
``getWorkers()``) stays as it was, and the pool adds only the decision of which queue a
free slot goes to.

Everything runs on the hub :meth:`Pool.run` or :meth:`Pool.start` is called on.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

import gevent
import gevent.event

from ...connection.clients import ConnectionLike, ConnectionSettings, close_client, make_client
from ...connection.cluster import is_cluster
from ...errors import WorkerStateError
from ...plugins.host import PluginHost
from .budget import DEFAULT_TURN, PoolBudget
from .watch import DISCOVER_EVERY_S, PoolWatcher, is_pattern, weight_for
from ..shared_wait import SharedMarkerWait
from ..worker import Worker

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["Pool"]


class Pool:
    """Serve several queues from one budget of ``concurrency`` slots.

    ``queues``: the queue names in pool order, or a mapping from name to that queue's
    worker options (``processor`` among them; ``concurrency`` is its cap in the pool,
    default the pool's ``concurrency``). An entry may be a pattern (``tenant-*``, as in
    the YAML file): every queue under the prefix that matches it is served, those that
    exist at start and those made later (found within ``discover_every`` seconds, by a
    SCAN, :mod:`.watch`), each with the pattern's options (its ``concurrency``: each found
    queue's cap). ``order``: ``strict`` (the first queue of the list with work wins),
    ``weighted`` (shares by ``weights``, a whole number per queue, 1 when not named; a
    weight given to a pattern is that of every queue it finds) or ``round_robin`` (equal
    turns). ``turn``: the jobs a slot runs for its queue in a row (fetch-next) before the
    order may give it to another queue that waits (default 1: the order decides at every
    job; more saves a pick-up a job when more queues have work than there are slots, and
    makes a waiting queue wait up to that many jobs a slot longer). ``processor``: for the
    queues that name none (None: the plugins find one per job name); ``defaults``: worker
    options for every queue. More queues: :meth:`add`.
    ``connection``, ``prefix``, ``plugins``, ``connection_settings``: as for a
    :class:`~echomq_gevent.worker.Worker`; the pool's workers share one plugin host (the
    one given, or one the pool makes), as those of the command do.

    A queue obliterated while the pool serves it (a named one, or one a pattern found) is
    dropped with a log line once no job of it runs here; nothing else stops. When a
    producer adds to it again, it is served again within ``discover_every`` seconds.

    >>> pool = Pool({"emails": {"processor": send}, "reports": {"processor": build, "concurrency": 5},
    ...              "tenant-*": {"processor": tenant_job, "concurrency": 2}},
    ...             concurrency=20, order="weighted", weights={"emails": 3, "tenant-*": 1}, connection=url)
    >>> pool.run()   # or pool.start(); ... pool.close()
    """

    def __init__(self, queues: Union[Iterable[str], Mapping[str, Optional[Mapping[str, Any]]]] = (),
                 concurrency: int = 10, order: str = "weighted", weights: Optional[Mapping[str, int]] = None,
                 connection: ConnectionLike = None, prefix: str = "bull", plugins: Any = None,
                 connection_settings: Optional[ConnectionSettings] = None, name: str = "default",
                 processor: Optional[Callable[..., Any]] = None, discover_every: float = DISCOVER_EVERY_S,
                 turn: int = DEFAULT_TURN, **defaults: Any) -> None:
        specs = dict(queues) if isinstance(queues, Mapping) else {q: None for q in queues}
        if isinstance(discover_every, bool) or not isinstance(discover_every, (int, float)) \
                or not 0.1 <= discover_every <= 3600:
            raise ValueError(f"pool {name!r}: discover_every must be a number of seconds from 0.1 to 3600, "
                             f"got {discover_every!r}")
        self.budget = PoolBudget(concurrency, order, weights, name=name,
                                 queues=list(specs) if weights else None, turn=turn)
        #: pattern -> the worker options of each queue it finds
        self.patterns: Dict[str, Dict[str, Any]] = {q: dict(o or {}) for q, o in specs.items() if is_pattern(q)}
        self.discover_every = float(discover_every)
        self.name = name
        self.prefix = prefix
        #: one plugin host for every queue (a host a queue: 1,000 plugin managers to load
        #: and to look hooks up in, one a job)
        self.plugins = plugins if plugins is not None else PluginHost()
        self.connection_settings = connection_settings
        self.processor = processor
        self.defaults = defaults
        self.client = make_client(connection, settings=connection_settings, reuse=True)
        self._owns_client = self.client is not connection
        # one BZPOPMIN for every queue of the pool (on a cluster, each queue waits on its primary)
        self.marker_wait = None if is_cluster(self.client) else SharedMarkerWait(self.client, connection_settings)
        #: queue name -> its Worker, in pool order (the queues the patterns found after)
        self.workers: Dict[str, Worker] = {}
        #: queue name -> what :meth:`add` was given for it (to make its worker again)
        self._added: Dict[str, Dict[str, Any]] = {}
        self._runs: List[gevent.Greenlet] = []
        self._started = False
        self._closed = False
        self._stop = gevent.event.Event()
        #: the queues that come and go (:mod:`.watch`), made by :meth:`start`
        self.watcher: Optional[PoolWatcher] = None
        self._watching: Optional[gevent.Greenlet] = None
        for queue_name, options in specs.items():
            if queue_name not in self.patterns:
                self.add(queue_name, **dict(options or {}))

    def __repr__(self) -> str:
        return f"<Pool {self.name!r} {self.budget.order} concurrency={self.budget.concurrency} queues={list(self.workers)}>"

    @property
    def weights(self) -> Dict[str, int]:
        """The weights given (by queue name or pattern)."""
        return self.budget.weights

    @property
    def concurrency(self) -> int:
        """The pool's slots; assignable while it runs."""
        return self.budget.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self.budget.set_concurrency(value)

    def add(self, queue_name: str, processor: Optional[Callable[..., Any]] = None, weight: Optional[int] = None,
            **options: Any) -> Worker:
        """Add a queue (after the others, for ``strict``) with its own worker options;
        ``weight`` for ``weighted``. Returns its Worker (started at once when the pool
        runs). Raises ``ValueError`` for a queue already in the pool or a bad weight."""
        if queue_name in self.workers or queue_name in self._added:
            raise ValueError(f"pool {self.name!r}: queue {queue_name!r} is in the pool already")
        if is_pattern(queue_name):
            raise ValueError(f"pool {self.name!r}: add takes a queue name, got the pattern {queue_name!r}; "
                             f"give patterns to Pool(queues=...)")
        if self._closed:
            raise WorkerStateError(f"pool {self.name!r} is closed")
        if weight is not None:
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ValueError(f"pool {self.name!r}: the weight of {queue_name!r} must be a whole number, "
                                 f"at least 1, got {weight!r}")
            self.budget.weights[queue_name] = weight
        self._added[queue_name] = dict(options, processor=processor)
        worker = self._make(queue_name, processor, options)
        if self.watcher is not None:
            self.watcher.declared[queue_name] = worker
            self.watcher.excluded.add(queue_name)
        self._serve(worker)
        return worker

    def _make(self, queue_name: str, processor: Optional[Callable[..., Any]], options: Mapping[str, Any]) -> Worker:
        merged = dict(self.defaults)
        merged.update(options)
        merged.setdefault("concurrency", self.budget.concurrency)
        return Worker(queue_name, processor or merged.pop("processor", None) or self.processor,
                      connection=self.client, prefix=self.prefix, plugins=self.plugins,
                      connection_settings=self.connection_settings, marker_wait=self.marker_wait,
                      pool=self.budget, **merged)

    def _serve(self, worker: Worker) -> None:
        """A worker joins the pool's list (started now when the pool runs)."""
        self.workers[worker.queue_name] = worker
        if self._started and not self._closed:
            self._runs.append(worker.start())

    # -- the queues that come and go (the watcher's calls) ------------------------------
    def _make_found(self, queue_name: str, pattern: Optional[str]) -> Worker:
        if pattern is None:  # a named queue, back after it was obliterated
            added = dict(self._added[queue_name])
            return self._make(queue_name, added.pop("processor", None), added)
        weight = weight_for(self.weights, queue_name, pattern)
        if weight is not None:
            self.budget.weights[queue_name] = weight
        return self._make(queue_name, None, self.patterns[pattern])

    def _drop(self, worker: Worker) -> None:
        if self.workers.get(worker.queue_name) is worker:
            del self.workers[worker.queue_name]
        gevent.spawn(worker.close, 0)

    # -- running ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start every queue's worker on a greenlet of the current hub; returns at once."""
        if self._started:
            raise WorkerStateError(f"pool {self.name!r} was started already")
        self._started = True
        self._runs = [w.start() for w in self.workers.values()]
        self.watcher = PoolWatcher(self.name, self.client, self.prefix, list(self.patterns), self._make_found,
                                   self._serve, self._drop, excluded=list(self._added),
                                   declared=dict(self.workers), every=self.discover_every)
        self._watching = gevent.spawn(self.watcher.run, self._stop)

    def run(self) -> None:
        """Start and block until the pool is closed (from another greenlet, or a signal:
        SIGTERM/SIGINT close it when it runs on the main greenlet). Queues come and go
        while it runs (patterns, obliterated queues): it runs until closed."""
        from ..signals import ShutdownSignals

        signals = ShutdownSignals(lambda _name: self.close(), lambda _name: self.close(0))
        signals.install()  # only on the main greenlet of the main thread
        try:
            if not self._started:
                self.start()
            self._stop.wait()
            gevent.joinall(self._runs)
        finally:
            signals.cancel()

    def close(self, timeout: Optional[float] = None) -> None:
        """Close every queue's worker together (each hands back what it could not finish
        within ``timeout`` s, default its ``shutdown_timeout``), then the shared connections."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._watching is not None:
            self._watching.kill()
        closers = [gevent.spawn(w.close, timeout) for w in self.workers.values()]
        gevent.joinall(closers)
        if self.marker_wait is not None:
            self.marker_wait.close()
        if self._owns_client:
            try:
                close_client(self.client)
            except Exception:  # pragma: no cover - best effort
                pass

    # -- what it uses ----------------------------------------------------------------------
    def usage(self) -> Dict[str, Any]:
        """The pool's budget and what each queue uses now (``echomq-gevent status``, the
        dashboard): ``{name, order, concurrency, in_use, queues: [...]}``."""
        return pool_usage(self.budget)


def pool_usage(budget: PoolBudget) -> Dict[str, Any]:
    """A :class:`PoolBudget`'s state as plain values (see :meth:`Pool.usage`)."""
    return {"name": budget.name, "order": budget.order, "concurrency": budget.concurrency, "turn": budget.turn,
            "in_use": sum(m.held for m in budget.members), "queues": budget.usage()}

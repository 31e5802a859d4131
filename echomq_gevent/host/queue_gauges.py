"""The queues' own numbers as Prometheus gauges, read from Redis when they are scraped,
by one process of the host.

Gauges (labels in braces):

* ``echomq_queue_jobs{queue,state}``: jobs per state (``waiting``, ``prioritized``,
  ``delayed``, ``active``, ``waiting-children``, ``completed``, ``failed``);
* ``echomq_queue_ready_jobs{queue}``: jobs a worker could take now (``wait``,
  ``prioritized`` and the delayed jobs already due);
* ``echomq_queue_oldest_age_seconds{queue}``: how long the oldest of those has been
  ready (0 when none is): the signal to alert and autoscale on;
* ``echomq_queue_paused{queue}``: 1 while the queue is paused (its jobs wait, and age);
* ``echomq_scheduler_overdue_seconds{queue,scheduler}``: how late each job scheduler's
  upcoming run is beyond its due time (0 while ahead);
* ``echomq_queue_stats_up``: 1 when the last scrape read Redis, else 0.

:class:`QueueGauges` is a prometheus_client collector: each scrape reads every queue it
watches in one round trip (:func:`~echomq_gevent.queue.stats.read_queue_stats`), so the
cost is per scrape, not per process. It is registered where the metrics are served:
the supervisor's port (``--processes``), the one process that serves
``ECHOMQ_PROMETHEUS_PORT``, or ``/_echomq/metrics`` under gunicorn (the worker that
answers the request reads Redis; the others do not). A scheduler whose run is late by
more than ``late_after`` seconds (``ECHOMQ_SCHEDULER_LATE_AFTER``, default
:data:`DEFAULT_LATE_AFTER`) is logged once per late run: at a scrape, and, without any
scrape, by :meth:`QueueGauges.watch_late`, which the one process of a host that watches
its queues runs (the supervisor with ``--processes``, else the single worker process).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..protocol.keys import QueueKeys

log = logging.getLogger("echomq_gevent.queue_gauges")

__all__ = ["QueueGauges", "process_gauges", "late_after_from_env", "late_check_interval", "DEFAULT_LATE_AFTER",
           "LATE_AFTER_ENV"]

#: Seconds a scheduler's run may be late before it is logged.
DEFAULT_LATE_AFTER = 60.0
LATE_AFTER_ENV = "ECHOMQ_SCHEDULER_LATE_AFTER"


def late_after_from_env(environ: Optional[Dict[str, str]] = None) -> float:
    """``ECHOMQ_SCHEDULER_LATE_AFTER`` in seconds, or the default (logged when invalid)."""
    raw = (os.environ if environ is None else environ).get(LATE_AFTER_ENV)
    if not raw:
        return DEFAULT_LATE_AFTER
    try:
        value = float(raw)
        if value >= 0:
            return value
    except ValueError:
        pass
    log.warning("%s=%r is not a number of seconds >= 0; using %g", LATE_AFTER_ENV, raw, DEFAULT_LATE_AFTER)
    return DEFAULT_LATE_AFTER


def late_check_interval(late_after: float) -> float:
    """Seconds between two looks for late schedulers without a scrape: half the margin,
    within 5 s and 60 s (a late run is logged at most that long after it became late)."""
    return min(60.0, max(5.0, late_after / 2.0))


class QueueGauges:
    """A prometheus_client collector of the queues' gauges (module docstring).

    ``connect()`` gives the Redis client (called at the first scrape, so a process that
    is never scraped opens nothing); :meth:`watch` adds queues, also with a client of
    their own. ``collect`` runs on the thread or greenlet that answers the scrape."""

    def __init__(self, connect: Optional[Callable[[], Any]] = None, queues: Sequence[QueueKeys] = (),
                 late_after: Optional[float] = None) -> None:
        self._connect = connect
        self._client: Any = None
        self._lock = threading.Lock()
        #: (client or None for the one from ``connect``, its queues)
        self._groups: List[Tuple[Any, List[QueueKeys]]] = [(None, list(queues))] if queues else []
        self.late_after = late_after_from_env() if late_after is None else late_after
        #: (queue, scheduler) -> the due time of the run last logged as late
        self._logged: Dict[Tuple[str, str], int] = {}
        self._registries: List[Any] = []

    @classmethod
    def for_config(cls, cfg: Any, url: str) -> "QueueGauges":
        """The gauges of a config's queues, on a client made from ``url`` and the file's
        connection settings at the first scrape."""
        def connect() -> Any:
            from ..connection.clients import make_client

            return make_client(url, settings=cfg.redis.connection)

        return cls(connect, [QueueKeys(name, cfg.prefix) for name in cfg.queues])

    def watch(self, client: Any, keys: QueueKeys) -> None:
        """Read queue ``keys`` on ``client`` too (idempotent)."""
        with self._lock:
            for c, queues in self._groups:
                if c is client:
                    if keys not in queues:
                        queues.append(keys)
                    return
            self._groups.append((client, [keys]))

    def register_on(self, registry: Any) -> None:
        """Register on ``registry`` unless already done (prometheus_client refuses twice)."""
        with self._lock:
            if any(r is registry for r in self._registries):
                return
            self._registries.append(registry)
        registry.register(self)

    @property
    def queues(self) -> List[QueueKeys]:
        return [k for _, queues in self._groups for k in queues]

    def _client_of(self, client: Any) -> Any:
        if client is not None:
            return client
        if self._client is None and self._connect is not None:
            self._client = self._connect()
        return self._client

    def read(self) -> Dict[str, Any]:
        """Every watched queue's :class:`~echomq_gevent.queue.stats.QueueStats`, by name
        (one round trip per client). Raises when Redis cannot be read."""
        from ..queue.stats import read_queue_stats

        out: Dict[str, Any] = {}
        with self._lock:
            groups = [(c, list(q)) for c, q in self._groups]
        for client, queues in groups:
            c = self._client_of(client)
            if c is None or not queues:
                continue
            out.update(read_queue_stats(c, queues))
        return out

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily("echomq_queue_stats_up", "1 when the last scrape read the queues from Redis")
        try:
            stats = self.read()
        except Exception as exc:  # a scrape must answer: the gauges are left out, up says why
            log.warning("cannot read the queues' gauges from Redis: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        jobs = GaugeMetricFamily("echomq_queue_jobs", "Jobs of the queue per state", labels=["queue", "state"])
        ready = GaugeMetricFamily("echomq_queue_ready_jobs",
                                  "Jobs ready to run now: wait, prioritized and the delayed jobs already due",
                                  labels=["queue"])
        age = GaugeMetricFamily("echomq_queue_oldest_age_seconds",
                                "How long the oldest job ready to run has waited (0 when none is)", labels=["queue"])
        paused = GaugeMetricFamily("echomq_queue_paused", "1 while the queue is paused", labels=["queue"])
        overdue = GaugeMetricFamily("echomq_scheduler_overdue_seconds",
                                    "How late the job scheduler's upcoming run is beyond its due time",
                                    labels=["queue", "scheduler"])
        for name, s in stats.items():
            for state, n in s.counts.items():
                jobs.add_metric([name, state], n)
            ready.add_metric([name], s.ready)
            age.add_metric([name], s.age.age_seconds)
            paused.add_metric([name], 1 if s.age.paused else 0)
            for late in s.schedulers:
                overdue.add_metric([name, late.scheduler_id], late.overdue_seconds)
                self._log_if_late(name, s.age.paused, late)
        yield from (up, jobs, ready, age, paused, overdue)

    def check_late(self) -> int:
        """Read the watched queues once and log each scheduler run late beyond
        ``late_after`` (once per late run, as a scrape does); return how many are late.
        Raises when Redis cannot be read."""
        count = 0
        for name, s in self.read().items():
            for late in s.schedulers:
                if late.overdue_seconds > self.late_after:
                    count += 1
                self._log_if_late(name, s.age.paused, late)
        return count

    def watch_late(self, interval: Optional[float] = None) -> Any:
        """A greenlet that calls :meth:`check_late` every ``interval`` seconds (default
        :func:`late_check_interval`) until it is killed; a failed read is logged once per
        outage and tried again at the next look."""
        import gevent

        every = late_check_interval(self.late_after) if interval is None else interval

        def loop() -> None:
            failing = False
            while True:
                gevent.sleep(every)
                try:
                    self.check_late()
                    failing = False
                except Exception as exc:
                    if not failing:
                        log.warning("cannot look for late job schedulers in Redis: %s; trying again every "
                                    "%g s", exc, every)
                    failing = True

        return gevent.spawn(loop)

    def _log_if_late(self, queue: str, paused: bool, late: Any) -> None:
        if late.overdue_seconds <= self.late_after:
            return
        key = (queue, late.scheduler_id)
        if self._logged.get(key) == late.next_ms:
            return
        self._logged[key] = late.next_ms
        log.warning("job scheduler %r of queue %r: its run due %.0f s ago has not started%s (no worker on the "
                    "queue, the workers busy, or the run's job gone)", late.scheduler_id, queue,
                    late.overdue_seconds, " (the queue is paused)" if paused else "")


_process_gauges: Optional[QueueGauges] = None
_process_lock = threading.Lock()


def process_gauges() -> QueueGauges:
    """This process's :class:`QueueGauges`, which the Prometheus plugin fills with the
    queues of the workers it sees start; registered only where this process serves the
    metrics."""
    global _process_gauges
    with _process_lock:
        if _process_gauges is None:
            _process_gauges = QueueGauges()
        return _process_gauges

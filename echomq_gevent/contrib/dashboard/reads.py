"""What the dashboard reads from Redis: which queues exist, their counts, the throughput
series of the chart, the job schedulers and a job's children.

One :class:`Reads` per dashboard; its methods run on the request's greenlet or thread
(the count samples are shared between requests under a lock).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from ...queue.discovery import QUEUE_MARKS, find_queues
from .web import Refused

log = logging.getLogger("echomq_gevent.dashboard")

#: The job states the pages list, in BullMQ's order of a job's life.
STATES = ("waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed")
#: Count samples kept per queue for the chart when BullMQ metrics are not recorded.
SAMPLES_KEPT = 120
#: how long a page waits for the first discovery of the queues before it is served with
#: the queues known so far and a notice (it reloads itself until the list is there)
FIRST_DISCOVERY_WAIT_S = 0.2
SAMPLE_EVERY_S = 2.0
#: Minutes of BullMQ's metrics the chart plots.
METRICS_MINUTES = 60


class Reads:
    """The reads of one dashboard over ``client`` (a ``redis.Redis``) and ``prefix``.

    ``queues`` fixes the queue names shown (others are refused with 404); otherwise they
    are found by a SCAN for BullMQ's ``events``, ``meta`` and ``id`` keys (on a Redis Cluster, of
    every primary: queues with their own hash tags live on different ones), repeated at
    most every ``discover_every_s`` seconds, plus ``known_queues``.
    """

    def __init__(self, client: Any, prefix: str, queues: Optional[Sequence[str]], known_queues: Sequence[str],
                 discover_every_s: float, sample_every_s: float) -> None:
        self.client = client
        self.prefix = prefix
        self.fixed_queues = list(queues) if queues is not None else None
        self.known_queues = list(known_queues)
        self.discover_every_s = discover_every_s
        self.sample_every_s = sample_every_s
        self._queues: Dict[str, Any] = {}
        self._known: List[str] = []
        self._known_at = 0.0
        self._discovered = False
        self._discovering = False
        self._first_done = threading.Event()
        self._first_error: Optional[BaseException] = None
        self._samples: Dict[str, Deque[Tuple[float, int, int]]] = {}
        self._lock = threading.Lock()

    # -- queues ---------------------------------------------------------------------------
    def queue_names(self) -> List[str]:
        """The queues shown: ``queues``, else the last discovery's list. Discoveries run
        behind the pages, one at a time: the first is waited for at most
        ``FIRST_DISCOVERY_WAIT_S`` (until then only ``known_queues`` are listed and
        :attr:`discovering` is true), and a list older than ``discover_every_s`` is returned
        as it is while a discovery refreshes it, so no page waits for a SCAN of every key
        (about 0.6 s per million keys). A first discovery that failed raises its error here."""
        if self.fixed_queues is not None:
            return list(self.fixed_queues)
        if not self._discovered:
            self._discover_behind()
            self._first_done.wait(FIRST_DISCOVERY_WAIT_S)
            if not self._discovered:
                err, self._first_error = self._first_error, None
                if err is not None:
                    raise err
                return sorted(set(self.known_queues))
        elif time.monotonic() - self._known_at >= self.discover_every_s:
            self._discover_behind()
        return list(self._known)

    @property
    def discovering(self) -> bool:
        """Whether the first discovery of the queues is still running."""
        return self.fixed_queues is None and not self._discovered

    def _discover(self) -> None:
        started = time.monotonic()
        # one pass over the keyspace for the queues' events, meta and id keys (queue/discovery.py)
        found = set(self.known_queues) | find_queues(self.client, self.prefix)
        self._known = sorted(found)
        self._known_at = started
        self._discovered = True

    def _discover_behind(self) -> None:
        """A discovery on a thread of its own (a greenlet under gevent's patching), unless
        one is running."""
        with self._lock:
            if self._discovering:
                return
            self._discovering = True
            if not self._discovered:
                self._first_done.clear()

        def run() -> None:
            try:
                self._discover()
            except Exception as exc:  # the last list stays; the next request tries again
                log.warning("dashboard: discovering the queues under %r failed: %s", self.prefix, exc)
                if not self._discovered:
                    self._first_error = exc
            finally:
                self._discovering = False
                self._first_done.set()

        threading.Thread(target=run, name="echomq-dashboard-discovery", daemon=True).start()

    def shows(self, name: str) -> bool:
        """Whether the dashboard shows the queue ``name``: one of ``queues``, else a known
        queue or one with BullMQ's ``events``, ``meta`` or ``id`` key (what discovery looks
        for), read with EXISTS: a page of one queue never waits for a discovery, a SCAN of every key
        of the database (seconds on a Redis of millions of jobs)."""
        if self.fixed_queues is not None:
            return name in self.fixed_queues
        if name in self.known_queues:
            return True
        if not name or ":" in name:
            return False
        if name in self._known and time.monotonic() - self._known_at < self.discover_every_s:
            return True
        head = f"{self.prefix}:{name}:"
        # one key a call: on a Redis Cluster a queue without a hash tag has its keys on several slots
        return any(self.client.exists(head + mark) for mark in QUEUE_MARKS)

    def queue(self, name: str) -> Any:
        """The :class:`~echomq_gevent.queue.Queue` named ``name`` (404 when the dashboard
        does not show it, see :meth:`shows`), made once."""
        if not self.shows(name):
            raise Refused("404 Not Found", f"no queue named {name!r} under prefix {self.prefix!r}")
        q = self._queues.get(name)
        if q is None:
            from ...queue.queue import Queue

            q = Queue(name, connection=self.client, prefix=self.prefix)
            self._queues[name] = q
        return q

    def close(self) -> None:
        for q in self._queues.values():
            q.close()
        self._queues.clear()

    # -- counts and throughput -------------------------------------------------------------
    def counts(self, q: Any) -> Dict[str, int]:
        """The queue's count per state (and a sample of them for the chart)."""
        counts = q.get_job_counts(*STATES)
        self._sample(q.name, counts)
        return counts

    def _sample(self, name: str, counts: Dict[str, int]) -> None:
        now = time.time()
        with self._lock:
            ring = self._samples.setdefault(name, collections.deque(maxlen=SAMPLES_KEPT))
            if ring and now - ring[-1][0] < self.sample_every_s:
                return
            ring.append((now, counts.get("completed", 0), counts.get("failed", 0)))

    def throughput(self, q: Any) -> Dict[str, Any]:
        """The chart's series, oldest first: per-minute completed/failed counts from
        BullMQ's metrics keys (``<prefix>:<queue>:metrics:completed|failed``, the last
        :data:`METRICS_MINUTES`) when a worker records them (``source`` ``"metrics"``),
        else rates from the counts this dashboard sampled (``source`` ``"samples"``)."""
        series: Dict[str, List[float]] = {}
        for kind in ("completed", "failed"):
            metrics = q.get_metrics(kind, 0, METRICS_MINUTES - 1)
            series[kind] = [_num(x) for x in reversed(metrics["data"])]
        if any(series.values()):
            return {"source": "metrics", "unit": "jobs/min", **series}
        with self._lock:
            ring = list(self._samples.get(q.name, ()))
        completed, failed = [], []
        for (t0, c0, f0), (t1, c1, f1) in zip(ring, ring[1:]):
            span = max(t1 - t0, 1e-3)
            completed.append(round(max(c1 - c0, 0) / span, 2))
            failed.append(round(max(f1 - f0, 0) / span, 2))
        return {"source": "samples", "unit": "jobs/s", "completed": completed, "failed": failed}

    # -- schedulers and flows --------------------------------------------------------------
    def schedulers(self, q: Any) -> List[Dict[str, Any]]:
        """The first 50 job schedulers of the queue, soonest first."""
        return [s.as_dict() if hasattr(s, "as_dict") else dict(s) for s in q.get_job_schedulers(0, 49, asc=True)]

    def dependencies(self, job: Any) -> Dict[str, List[str]]:
        """A job's children by kind (``processed``, ``unprocessed``, ``failed``,
        ``ignored``), as job keys."""
        deps = job.get_dependencies()
        return {k: list(v) if not isinstance(v, dict) else list(v.keys()) for k, v in deps.items()}


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0

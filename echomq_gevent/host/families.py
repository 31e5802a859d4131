"""Queue families: the queues a pool's pattern (``tenant-*``) finds, served as they appear.

A pool whose ``queues`` hold a pattern (:mod:`.pools`) serves every queue under the prefix
whose name matches it: one queue per tenant, on plain BullMQ keys, so a Node producer, Node
workers and bull-board see ordinary queues. A :class:`FamilyWatcher` per such pool looks
for them at start and every ``discover_every`` seconds (5 by default) with a SCAN for the
queues' ``events``, ``meta`` and ``id`` keys (:func:`~echomq_gevent.queue.discovery.find_queues`,
never ``KEYS``; every add writes the ``events`` stream, whatever the job's id), and:

* a queue found for the first time gets a :class:`~echomq_gevent.worker.Worker` of the
  pool (its cap ``max_per_queue``, the file's ``defaults:``, the pool's ``processor``),
  started on the runner's hub with the others: it waits in the shared marker wait and
  costs nothing while it has no job ready;
* a queue whose keys are gone (obliterated) and that has no job in flight here is dropped
  from the pool with a log line: its worker closes, nothing else stops; if a producer
  makes it again, the next look finds it again;
* a queue declared under ``queues:`` is never taken by a pattern (it runs as declared),
  nor is one an earlier pool's pattern took.

A pattern that matches nothing at start is allowed: the watcher logs that it waits for
queues. Runs on a greenlet of the runner's hub.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, Optional, Set

import gevent

from ..queue.discovery import find_queues

log = logging.getLogger("echomq_gevent.runner")

__all__ = ["FamilyWatcher"]


class FamilyWatcher:
    """The queues one pool's patterns find (see the module's docstring).

    ``pool``: its :class:`~.pools.PoolConfig`; ``client``: the runner's command client;
    ``make_worker(name)`` builds the Worker of a queue found; ``add(worker)`` starts it
    with the runner's others, ``drop(worker)`` closes and forgets it. ``excluded``: the
    names no pattern may take (the declared queues), and ``claimed``: the names taken by
    any pool's patterns, shared by the watchers of one runner (the first pool wins).
    """

    def __init__(self, pool: Any, client: Any, prefix: str, make_worker: Callable[[str], Any],
                 add: Callable[[Any], None], drop: Callable[[Any], None], excluded: Iterable[str],
                 claimed: Set[str]) -> None:
        self.pool = pool
        self.client = client
        self.prefix = prefix
        self.make_worker = make_worker
        self.add = add
        self.drop = drop
        self.excluded = set(excluded)
        self.claimed = claimed
        #: queue name -> its Worker, for the queues found
        self.members: Dict[str, Any] = {}
        self.looks = 0

    def run(self, stop: Any) -> None:
        """Look now and every ``discover_every`` seconds until ``stop`` (an Event) is set.
        A look that fails (Redis away) is logged and tried again at the next period."""
        while not stop.is_set():
            try:
                self.look(stop)
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                log.warning("pool %r: looking for the queues of %s failed (%s: %s); trying again in %g s",
                            self.pool.name, self._patterns(), type(exc).__name__, exc, self.pool.discover_every)
            if stop.wait(self.pool.discover_every):
                return

    def _patterns(self) -> str:
        return ", ".join(repr(p) for p in self.pool.patterns)

    def look(self, stop: Optional[Any] = None) -> None:
        """One look: serve the queues found since the last, drop those gone."""
        found: Set[str] = set()
        for pattern in self.pool.patterns:
            found |= find_queues(self.client, self.prefix, pattern)
        found -= self.excluded
        self.looks += 1
        if stop is not None and stop.is_set():
            return
        new = sorted(name for name in found if name not in self.members and name not in self.claimed)
        for name in new:
            worker = self.make_worker(name)
            self.members[name] = worker
            self.claimed.add(name)
            self.add(worker)
        if new:
            log.info("pool %r: %d queue(s) of %s found and served from now on: %s", self.pool.name, len(new),
                     self._patterns(), ", ".join(new[:10]) + (" ..." if len(new) > 10 else ""))
        for name in sorted(set(self.members) - found):
            worker = self.members[name]
            if worker.active_jobs:
                continue  # jobs of it still run here: look again next time
            del self.members[name]
            self.claimed.discard(name)
            log.info("pool %r: queue %r is gone (its keys were deleted, e.g. obliterated); dropped from the "
                     "pool", self.pool.name, name)
            self.drop(worker)
        if self.looks == 1 and not self.members:
            log.info("pool %r: no queue matches %s yet; looking again every %g s", self.pool.name,
                     self._patterns(), self.pool.discover_every)

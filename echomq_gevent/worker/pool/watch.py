"""Which queues a pool serves while it runs: the queues its patterns find, and its declared
queues that were deleted and made again.

A :class:`PoolWatcher` per pool (made by :class:`~.pool.Pool` and by the runner for
``pools:`` in the YAML file) looks at start and every ``every`` seconds (5 by default):

* **Patterns** (``tenant-*``): a SCAN for the queues that exist under the prefix
  (:func:`~echomq_gevent.queue.discovery.find_queues`, by their ``events``, ``meta`` and
  ``id`` keys, never ``KEYS``). A queue found for the first time gets a worker of the pool
  (``make_worker(name, pattern)``), started with the others: it waits in the shared marker
  wait and costs nothing while it has no job ready. A queue whose keys are gone
  (obliterated) and that has no job in flight here is dropped with a log line: its worker
  closes, nothing else stops; if a producer makes it again, a later look serves it again.
  A pattern matching nothing yet is allowed: logged once, looked for again.
* **Declared queues** (named in the pool): one ``EXISTS`` a mark for each. A declared queue
  seen with keys that then has none (obliterated), with no job in flight here, is dropped
  the same way, with a log line; when a producer adds to it again, the next look serves it
  again (``make_worker(name, None)``), with a log line: a declared queue is served whenever
  it has jobs, within ``every`` seconds of its first job after it was obliterated. A
  declared queue that never had keys (nothing added yet) is served from the start.

A declared queue is never taken by a pattern, nor is one an earlier pool's pattern took
(``claimed``, shared by the watchers of a process). Runs on a greenlet of the pool's hub.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Set

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["PoolWatcher", "is_pattern", "weight_for", "DISCOVER_EVERY_S"]

#: Seconds between two looks, by default.
DISCOVER_EVERY_S = 5.0
_GLOB = re.compile(r"[*?\[]")


def is_pattern(name: Any) -> bool:
    """Whether a pool's ``queues`` entry is a pattern (``tenant-*``) rather than a name."""
    return isinstance(name, str) and bool(_GLOB.search(name)) and ":" not in name


def weight_for(weights: Dict[str, int], name: str, pattern: Optional[str]) -> Optional[int]:
    """The weight a queue gets: its own, else that of the pattern that found it (None: none
    given, 1 then)."""
    if name in weights:
        return weights[name]
    if pattern is not None:
        return weights.get(pattern)
    return None


class PoolWatcher:
    """The queues one pool serves as they come and go (see the module's docstring).

    ``pool``: the pool's name (logs); ``patterns``: its patterns; ``declared``: queue name
    -> its worker, for the queues the pool names; ``make_worker(name, pattern)`` builds the
    worker of a queue (``pattern`` None for a declared one), ``add(worker)`` starts it with
    the others, ``drop(worker)`` closes and forgets it. ``excluded``: names no pattern may
    take (every declared queue), ``claimed``: names taken by the patterns of any pool of the
    process (the first pool wins).
    """

    def __init__(self, pool: str, client: Any, prefix: str, patterns: Iterable[str],
                 make_worker: Callable[[str, Optional[str]], Any], add: Callable[[Any], None],
                 drop: Callable[[Any], None], excluded: Iterable[str] = (), claimed: Optional[Set[str]] = None,
                 declared: Optional[Dict[str, Any]] = None, every: float = DISCOVER_EVERY_S) -> None:
        self.pool = pool
        self.client = client
        self.prefix = prefix
        self.patterns: List[str] = list(patterns)
        self.make_worker = make_worker
        self.add = add
        self.drop = drop
        self.excluded = set(excluded)
        self.claimed: Set[str] = claimed if claimed is not None else set()
        self.every = every
        #: queue name -> its worker, for the queues the patterns found
        self.members: Dict[str, Any] = {}
        #: declared queue name -> its worker, or None while it is dropped (its keys gone)
        self.declared: Dict[str, Any] = dict(declared or {})
        #: the declared queues seen with keys (only those can be dropped)
        self._seen: Set[str] = set()
        self.looks = 0

    def run(self, stop: Any) -> None:
        """Look now and every ``every`` seconds until ``stop`` (an Event) is set. A look
        that fails (Redis away) is logged and tried again at the next period."""
        from gevent import GreenletExit

        while not stop.is_set():
            try:
                self.look(stop)
            except GreenletExit:
                raise
            except Exception as exc:
                log.warning("pool %r: looking for its queues failed (%s: %s); trying again in %g s",
                            self.pool, type(exc).__name__, exc, self.every)
            if stop.wait(self.every):
                return

    def _patterns(self) -> str:
        return ", ".join(repr(p) for p in self.patterns)

    def look(self, stop: Optional[Any] = None) -> None:
        """One look: serve the queues found or back since the last, drop those gone."""
        from ...queue.discovery import find_queues  # (redis: not needed to read a configuration)

        present = self._present(list(self.declared)) if self.declared else set()
        found: Dict[str, str] = {}
        for pattern in self.patterns:
            for name in find_queues(self.client, self.prefix, pattern):
                found.setdefault(name, pattern)
        for name in self.excluded:
            found.pop(name, None)
        self.looks += 1
        if stop is not None and stop.is_set():
            return
        self._declared(present)
        new = sorted(name for name in found if name not in self.members and name not in self.claimed)
        for name in new:
            worker = self.make_worker(name, found[name])
            self.members[name] = worker
            self.claimed.add(name)
            self.add(worker)
        if new:
            log.info("pool %r: %d queue(s) of %s found and served from now on: %s", self.pool, len(new),
                     self._patterns(), ", ".join(new[:10]) + (" ..." if len(new) > 10 else ""))
        for name in sorted(set(self.members) - set(found)):
            worker = self.members[name]
            if worker.active_jobs:
                continue  # jobs of it still run here: look again next time
            del self.members[name]
            self.claimed.discard(name)
            log.info("pool %r: queue %r is gone (its keys were deleted, e.g. obliterated); dropped from the "
                     "pool", self.pool, name)
            self.drop(worker)
        if self.patterns and self.looks == 1 and not self.members:
            log.info("pool %r: no queue matches %s yet; looking again every %g s", self.pool,
                     self._patterns(), self.every)

    def _declared(self, present: Set[str]) -> None:
        """Drop the declared queues whose keys are gone, serve again those back."""
        for name, worker in list(self.declared.items()):
            if name in present:
                self._seen.add(name)
                if worker is None:
                    self.declared[name] = worker = self.make_worker(name, None)
                    self.add(worker)
                    log.info("pool %r: queue %r has jobs again; served by the pool again", self.pool, name)
            elif worker is not None and name in self._seen and not worker.active_jobs:
                self.declared[name] = None
                log.info("pool %r: queue %r is gone (its keys were deleted, e.g. obliterated); dropped from the "
                         "pool until a job is added to it again", self.pool, name)
                self.drop(worker)

    def _present(self, names: List[str]) -> Set[str]:
        """The names among ``names`` with any of a queue's marks (one EXISTS a key, in one
        pipeline: on a Redis Cluster a queue's keys may be on several slots)."""
        from ...queue.discovery import QUEUE_MARKS

        pipe = self.client.pipeline(transaction=False)
        for name in names:
            for mark in QUEUE_MARKS:
                pipe.exists(f"{self.prefix}:{name}:{mark}")
        answers = pipe.execute()
        n = len(QUEUE_MARKS)
        return {name for i, name in enumerate(names) if any(answers[i * n:(i + 1) * n])}

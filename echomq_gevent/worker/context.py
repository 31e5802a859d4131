"""What the parts of one worker share: :class:`WorkerContext` and :class:`FetchHints`.

A :class:`~echomq_gevent.worker.Worker` is made of parts, each an object that owns its
own state (:mod:`.fetch`, :mod:`.settle`, :mod:`.lifecycle`, :mod:`.cancel`,
:mod:`.manual`). What more than one of them reads is here, in one documented place, and
is handed to each part when the Worker makes it; nothing else is shared.

Everything runs on the worker's hub: the fields are read and written without locks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import gevent.event

if TYPE_CHECKING:  # pragma: no cover
    import redis

    from ..plugins.host import PluginHost
    from ..protocol.keys import QueueKeys
    from ..protocol.scripts import Scripts
    from .locks import LockRenewer
    from .slots import Slot

__all__ = ["WorkerContext", "FetchHints"]


class FetchHints:
    """What the other parts tell the fetch loop between its turns: wake up, a rate limit
    runs until a time, jobs were put back in ``wait``, a pick-up's answer was lost.

    The fetch loop reads these fields on every turn and also sets them from the answers
    of its own pick-ups; the settler, the Worker's ``pause``/``resume``/``rate_limit`` and
    the close only call the methods.
    """

    __slots__ = ("kick", "limit_until", "drained", "unknown_pickups")

    def __init__(self) -> None:
        #: set to wake the fetch loop (a slot freed, a state changed); it clears it before waiting
        self.kick = gevent.event.Event()
        #: epoch ms until which fetching is rate limited (0: not limited)
        self.limit_until = 0
        #: the last pick-up found nothing: wait on the marker before the next
        self.drained = False
        #: tokens of pick-ups (or fetch-nexts) whose answer was lost; read back by the loop
        self.unknown_pickups: List[str] = []

    def wake(self) -> None:
        self.kick.set()

    def limit(self, until_ms: int) -> None:
        """No pick-up before ``until_ms`` (a later limit already known is kept)."""
        if until_ms > self.limit_until:
            self.limit_until = until_ms

    def put_back(self) -> None:
        """A job went back to ``wait``: pick up instead of waiting on the marker."""
        self.drained = False
        self.kick.set()

    def lost_answer(self, token: str) -> None:
        """A call that may have taken a job under ``token`` lost its answer: find it."""
        self.unknown_pickups.append(token)
        self.kick.set()


class WorkerContext:
    """The state the parts of one Worker share, made once by the Worker.

    * Who the worker is, fixed at construction: ``worker`` (the public face, passed to
      plugin hooks and the failure policy), ``queue_name``, ``prefix``, ``keys``,
      ``client``, ``scripts``, ``plugins``, ``options``, ``id``, ``label`` (for messages).
    * Settings a user may change while the worker runs (``Worker.name = ...``); read
      where they are used, never copied: ``name``, ``lock_duration``, ``limiter``,
      ``drain_delay``.
    * ``active``: the slots of the jobs in flight by job id (the fetch loop adds and
      removes them; the others look them up). ``counters``: counts since the start.
      ``hints``: the fetch loop's :class:`FetchHints`.
    * The run's state, written only by the lifecycle: ``running`` (between ``run()``
      starting and the close finishing), ``set_up`` (connections made, lock renewal
      started), ``closing`` (no new jobs), ``force`` (set: hand unfinished jobs back now).
    * The run's shared resources, made by the lifecycle's set-up (``None`` before):
      ``runtime`` (where processors run), ``locks`` (the lock-renewal thread),
      ``hub_monitor`` (the hub watchdog, when ``hub_block_threshold`` is set).
    """

    __slots__ = ("worker", "queue_name", "prefix", "keys", "client", "scripts", "plugins", "options", "id",
                 "label", "name", "lock_duration", "limiter", "drain_delay", "active", "cancel_requests", "counters", "hints",
                 "running", "set_up", "closing", "force", "runtime", "locks", "hub_monitor")

    def __init__(self, worker: Any, queue_name: str, prefix: str, keys: "QueueKeys", client: "redis.Redis",
                 scripts: "Scripts", plugins: "PluginHost", options: Dict[str, Any], worker_id: str) -> None:
        self.worker = worker
        self.queue_name = queue_name
        self.prefix = prefix
        self.keys = keys
        self.client = client
        self.scripts = scripts
        self.plugins = plugins
        self.options = options
        self.id = worker_id
        self.label = f"queue {queue_name!r}"
        self.name: Optional[str] = options["name"]
        self.lock_duration: int = options["lock_duration"]
        self.drain_delay: float = float(options["drain_delay"])
        self.limiter: Optional[Dict[str, int]] = (
            {"max": int(options["limiter"]["max"]), "duration": int(options["limiter"]["duration"])}
            if options["limiter"] else None)
        self.active: Dict[str, "Slot"] = {}
        #: job id -> (reason, monotonic time): cancellations from the queue's channel for
        #: jobs not running here when they came (a pick-up still on its way; :mod:`.remote_cancel`)
        self.cancel_requests: Dict[str, Tuple[str, float]] = {}
        #: completed, failed (final), retried, stalled (found by this worker's check),
        #: lock_lost, handed_back
        self.counters: Dict[str, int] = dict.fromkeys(
            ("completed", "failed", "retried", "stalled", "lock_lost", "handed_back"), 0)
        self.hints = FetchHints()
        self.running = False
        self.set_up = False
        self.closing = False
        self.force = gevent.event.Event()
        self.runtime: Any = None
        self.locks: Optional["LockRenewer"] = None
        self.hub_monitor: Any = None

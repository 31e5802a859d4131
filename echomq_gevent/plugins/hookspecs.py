"""The plugin hooks of echomq-gevent (pluggy project name ``echomq_gevent``).

Plugins implement any of these with :data:`echomq_gevent.hookimpl`. Three kinds:

* **look-ups and decisions** (``firstresult``): the first plugin that answers something
  other than ``None`` wins; plugins registered later are asked first.
* **registration**: called once when a worker host starts.
* **telemetry** (broadcast): every plugin is told; each call is guarded, so a plugin
  that raises is logged and never fails a job or stops the worker.

Unless a hook says otherwise it is called on the job's own greenlet (inside the
worker's pool) or on the worker's fetch-loop greenlet, never on the lock-renewal
thread; a hook must not block the hub for long (no sleeping without gevent
patching, no CPU loops).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from ..queue.job import Job

PROJECT = "echomq_gevent"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["PROJECT", "hookspec", "hookimpl", "FailureDecision", "ProcessorRegistry"]


@dataclass(frozen=True)
class FailureDecision:
    """What to do with a job whose processor raised.

    ``action`` is one of:

    * ``"retry"``: try again after ``delay`` ms (0 or ``None``: at once); counts an attempt.
    * ``"fail"``: fail the job now (it keeps its attempts for a manual retry).
    * ``"unrecoverable"``: fail now, as BullMQ's ``UnrecoverableError`` does.
    * ``"move"``: fail here and add a copy of the job (same name, data and options,
      attempts reset) to queue ``queue`` of the same prefix, e.g. a dead-letter queue.
    """

    action: str
    delay: Optional[int] = None
    queue: Optional[str] = None

    def __post_init__(self) -> None:
        if self.action not in ("retry", "fail", "unrecoverable", "move"):
            raise ValueError(
                f"FailureDecision.action must be 'retry', 'fail', 'unrecoverable' or 'move', got {self.action!r}"
            )
        if self.action == "move" and not self.queue:
            raise ValueError("FailureDecision(action='move') needs the target queue name")
        if self.delay is not None and (not isinstance(self.delay, int) or self.delay < 0):
            raise ValueError(f"FailureDecision.delay must be an int >= 0 (ms), got {self.delay!r}")

    @classmethod
    def retry(cls, delay: int = 0) -> "FailureDecision":
        return cls("retry", delay=delay)

    @classmethod
    def fail(cls) -> "FailureDecision":
        return cls("fail")

    @classmethod
    def unrecoverable(cls) -> "FailureDecision":
        return cls("unrecoverable")

    @classmethod
    def move_to(cls, queue: str) -> "FailureDecision":
        return cls("move", queue=queue)


class ProcessorRegistry:
    """Static routing table ``(queue, job name) -> processor`` filled by
    :func:`echomq_register_processors`. ``job_name="*"`` serves every name of a queue."""

    def __init__(self) -> None:
        self._routes: dict = {}

    def add(self, queue: str, job_name: str, processor: Callable[["Job"], Any]) -> None:
        if not callable(processor):
            raise TypeError(f"processor for ({queue!r}, {job_name!r}) is not callable: {processor!r}")
        key = (queue, job_name)
        if key in self._routes and self._routes[key] is not processor:
            raise ValueError(f"two processors registered for queue {queue!r}, job name {job_name!r}")
        self._routes[key] = processor

    def get(self, queue: str, job_name: str) -> Optional[Callable[["Job"], Any]]:
        return self._routes.get((queue, job_name)) or self._routes.get((queue, "*"))

    def routes(self) -> dict:
        return dict(self._routes)


# --- processors ------------------------------------------------------------------------
@hookspec
def echomq_register_processors(registry: ProcessorRegistry) -> None:
    """Register static processors: ``registry.add(queue, job_name, fn)``.

    Called once per worker host (plugin host creation), on the main greenlet.
    """


@hookspec(firstresult=True)
def echomq_get_processor(queue: str, job_name: str) -> Optional[Callable[["Job"], Any]]:
    """Return the processor for a job named ``job_name`` on ``queue``, or ``None``.

    Asked when the static registry has no route; the answer is cached per
    ``(queue, job_name)``. Called on the job's greenlet. A job no plugin serves fails
    (unrecoverably) with a reason naming the queue and the job name.
    """


@hookspec
def echomq_job_context(worker: Any, job: "Job") -> Optional[Any]:
    """Return a context manager to run ``job``'s processor inside, or ``None``.

    Every implementation is asked, on the job's greenlet, right before the processor
    runs; the context managers returned are entered in pluggy's call order and exited
    in reverse after the processor returned or raised, still on the job's greenlet.
    The framework integrations use it for an app context, a request, a transaction
    and database connection hygiene per job. An exception from entering or exiting a
    context fails the attempt like one from the processor (retries apply); the job's
    result is written only after every context exited cleanly. With ``offload:
    thread`` the contexts still run on the job's greenlet, around the thread call.
    """


# --- failure policy --------------------------------------------------------------------
@hookspec(firstresult=True)
def echomq_failure_decision(worker: Any, job: "Job", error: BaseException) -> Optional[FailureDecision]:
    """Decide what happens to ``job`` after its processor raised ``error``.

    Return a :class:`FailureDecision`, or ``None`` for BullMQ's own rule (retry while
    ``attemptsMade + 1 < attempts`` with the job's backoff, unless the error is
    unrecoverable). Called on the job's greenlet before anything is written.
    """


@hookspec(firstresult=True)
def echomq_backoff_delay(backoff_type: str, attempts_made: int, delay: int, error: BaseException,
                         job: "Job") -> Optional[int]:
    """Delay in ms before the next attempt for a custom ``backoff.type``.

    ``attempts_made`` counts the attempt that just failed (1 on the first failure);
    ``delay`` is ``backoff.delay`` (0 when absent). Return ``-1`` to fail the job
    instead of retrying, or ``None`` when this plugin does not know the type. The
    built-in types ``fixed`` and ``exponential`` are answered by the built-in plugin.
    """


# --- producer side ---------------------------------------------------------------------------
@hookspec(firstresult=True)
def echomq_add_job(queue: Any, name: str, data: Any, opts: Dict[str, Any],
                   add: Callable[[str, Any, Dict[str, Any]], "Job"]) -> Optional["Job"]:
    """Add one job for a :class:`~echomq_gevent.queue.Queue` made with ``plugins=``.

    The built-in implementation (``trylast``) calls ``add(name, data, opts)`` and returns
    the job. Wrap it (``hookwrapper=True``) to act around an add on the caller's greenlet
    or thread: change ``opts`` (the caller's options as a fresh dict, BullMQ names) before
    the ``yield`` (e.g. put trace context into ``opts["telemetry"]``), read the added job
    from the outcome after it. A queue without a plugin host adds directly and never calls
    this hook; an exception here fails the add, so a wrapper must guard its own code.
    """


@hookspec(firstresult=True)
def echomq_add_bulk(queue: Any, jobs: List[Dict[str, Any]],
                    add_bulk: Callable[[List[Dict[str, Any]]], List["Job"]]) -> Optional[List["Job"]]:
    """Add many jobs for a :class:`~echomq_gevent.queue.Queue` made with ``plugins=``
    (:meth:`~echomq_gevent.queue.Queue.add_bulk`).

    ``jobs`` is a fresh list of ``{"name", "data", "opts"}`` dicts (``opts`` a fresh dict
    of the caller's options, BullMQ names). The built-in implementation (``trylast``)
    calls ``add_bulk(jobs)`` and returns the jobs. Wrappers work as for
    :func:`echomq_add_job`.
    """


@hookspec(firstresult=True)
def echomq_add_flows(producer: Any, operation: str, flows: List[Dict[str, Any]],
                     add: Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]) -> Optional[List[Dict[str, Any]]]:
    """Add flow trees for a :class:`~echomq_gevent.queue.flows.FlowProducer` made with ``plugins=``.

    ``operation`` is ``"addFlow"`` (:meth:`~echomq_gevent.queue.flows.FlowProducer.add`, one
    tree) or ``"addBulkFlows"`` (``add_bulk``), as BullMQ names them; ``flows`` a fresh
    copy of the trees (every node a fresh dict, its ``opts`` a fresh dict, ``children`` a
    fresh list) that a wrapper may change before the ``yield``. The built-in
    implementation (``trylast``) calls ``add(flows)`` and returns the job trees, in the
    order and shape of ``flows``.
    """


# --- telemetry ---------------------------------------------------------------------------
@hookspec
def echomq_worker_started(worker: Any) -> None:
    """The worker's fetch loop is about to take its first job."""


@hookspec
def echomq_worker_stopping(worker: Any, reason: str) -> None:
    """The worker stops fetching (``reason``: ``"close"``, ``"signal"``, ``"gunicorn"``...)."""


@hookspec
def echomq_job_active(worker: Any, job: "Job") -> None:
    """The job was taken and its processor is about to run."""


@hookspec
def echomq_job_completed(worker: Any, job: "Job", result: Any, duration_ms: float) -> None:
    """The job completed and ``moveToFinished`` accepted it."""


@hookspec
def echomq_job_retried(worker: Any, job: "Job", error: BaseException, delay_ms: int) -> None:
    """The attempt failed and the job will run again after ``delay_ms``."""


@hookspec
def echomq_job_failed(worker: Any, job: "Job", error: BaseException) -> None:
    """The job failed for good (no attempts left, unrecoverable, or a policy said so)."""


@hookspec
def echomq_job_stalled(worker: Any, queue: str, job_id: str) -> None:
    """This worker's stalled check found ``job_id`` stalled and moved it back to wait."""


@hookspec
def echomq_job_lock_lost(worker: Any, job: "Job") -> None:
    """The worker no longer owns the job's lock (renewal refused, or -2/-6 at finish);
    its result was not written."""


@hookspec
def echomq_job_moved(worker: Any, job: "Job", state: str, error: BaseException) -> None:
    """The job left active without a result: the processor moved it itself and raised
    ``DelayedError`` (``state`` ``"delayed"``) or ``WaitingChildrenError``
    (``"waiting-children"``), or raised ``RateLimitError`` and the worker put it back at
    the front of the queue (``"wait"``). No attempt is counted; it starts again with
    ``echomq_job_active``."""


@hookspec
def echomq_job_handed_back(worker: Any, job: "Job") -> None:
    """At shutdown, the unfinished job was handed back to the front of wait."""

"""``drain()``: run a test's jobs with real workers, in the test's own process, until
nothing is left to run.

The workers are the production ``Worker`` on the test's Redis, with the processors
found as the worker command finds them (a mapping given by the test, or the YAML
file and its plugins), so what passes here passes in production. Delayed jobs and
retries waiting for their backoff are promoted at once (``delayed="run"``): a test of
"fails twice, then succeeds" takes milliseconds. What happened comes back in order:
the jobs that completed with their return values, those that failed for good with
their reasons, and each retried attempt.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gevent

from ...errors import ConfigError
from ...plugins.hookspecs import hookimpl

__all__ = ["drain", "DrainResult", "JobOutcome", "DrainTimeout", "DELAYED_MODES"]

#: ``run``: promote delayed jobs and backoff retries at once and wait for them;
#: ``leave``: leave them delayed (drain stops when only they are left)
DELAYED_MODES = ("run", "leave")
#: how often drain looks at the queues (seconds)
POLL_S = 0.005
#: worker options of a queue drained without a configuration
DRAIN_OPTIONS = {"drain_delay": 0.5, "shutdown_timeout": 1}

Processors = Mapping[Union[str, Tuple[str, str]], Callable[..., Any]]


@dataclasses.dataclass
class JobOutcome:
    """One job's end (or, in ``retried``, one failed attempt before a retry)."""

    queue: str
    id: str
    name: str
    data: Any
    #: the return value (completed jobs)
    value: Any = None
    #: the failure's reason, as the job's ``failedReason`` (failed and retried)
    reason: Optional[str] = None
    #: the exception the processor raised (failed and retried)
    error: Optional[BaseException] = None
    #: attempts made when it ended
    attempts: int = 0

    def __repr__(self) -> str:
        what = f"value={self.value!r}" if self.reason is None else f"reason={self.reason!r}"
        return f"<{self.queue} job {self.id} {self.name!r} {what}>"


@dataclasses.dataclass
class DrainResult:
    """What a drain ran, each list in the order it happened."""

    completed: List[JobOutcome] = dataclasses.field(default_factory=list)
    failed: List[JobOutcome] = dataclasses.field(default_factory=list)
    retried: List[JobOutcome] = dataclasses.field(default_factory=list)

    @property
    def values(self) -> List[Any]:
        """The completed jobs' return values, in order."""
        return [o.value for o in self.completed]

    @property
    def reasons(self) -> List[Optional[str]]:
        """The failed jobs' reasons, in order."""
        return [o.reason for o in self.failed]

    def job(self, job_id: str) -> JobOutcome:
        """The completed or failed job ``job_id`` (KeyError naming those there otherwise)."""
        for o in self.completed + self.failed:
            if o.id == str(job_id):
                return o
        raise KeyError(f"job {job_id!r} neither completed nor failed in this drain; it ran: "
                       f"{self.completed + self.failed}")


class DrainTimeout(AssertionError):
    """Drain's ``timeout`` passed with jobs still running: ``active`` names them
    (``(queue, job id)``), handed back to their queue's wait list; ``result`` holds
    what finished before."""

    def __init__(self, message: str, active: List[Tuple[str, str]], result: DrainResult) -> None:
        super().__init__(message)
        self.active = active
        self.result = result


class _Routes:
    """Plugin: the test's processors, registered as the worker command registers a
    plugin's (a name alone serves every drained queue)."""

    __name__ = "echomq_gevent.testing.processors"

    def __init__(self, processors: Processors, queues: Sequence[str]) -> None:
        self.routes: List[Tuple[str, str, Callable[..., Any]]] = []
        for key, fn in processors.items():
            if isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key):
                self.routes.append((key[0], key[1], fn))
            elif isinstance(key, str):
                self.routes.extend((q, key, fn) for q in queues)
            else:
                raise TypeError(f"drain(processors=...): a key must be a job name or (queue, job name), got {key!r}")
            if not callable(fn):
                raise TypeError(f"drain(processors=...): the processor of {key!r} is not callable: {fn!r}")

    @hookimpl
    def echomq_register_processors(self, registry: Any) -> None:
        for queue, name, fn in self.routes:
            registry.add(queue, name, fn)


class _Recorder:
    """Plugin: writes down every end and retry as the workers report them."""

    __name__ = "echomq_gevent.testing.recorder"

    def __init__(self) -> None:
        self.result = DrainResult()
        self.first_error: Optional[BaseException] = None

    @staticmethod
    def _outcome(job: Any, **fields: Any) -> JobOutcome:
        return JobOutcome(queue=job.queue_name, id=str(job.id), name=job.name, data=job.data,
                          attempts=job.attempts_made, **fields)

    def _error(self, error: BaseException) -> None:
        if self.first_error is None:
            self.first_error = error

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        self.result.completed.append(self._outcome(job, value=result))

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        self._error(error)
        self.result.failed.append(self._outcome(job, reason=job.failed_reason or str(error), error=error))

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        self._error(error)
        self.result.retried.append(self._outcome(job, reason=job.failed_reason or str(error), error=error))


def _queues(queue: Any) -> List[Any]:
    queues = list(queue) if isinstance(queue, (list, tuple)) else [queue]
    if not queues or not all(hasattr(q, "keys") and hasattr(q, "client") for q in queues):
        raise TypeError(f"drain(queue): a Queue or a list of Queues, got {queue!r}")
    return queues


def _workers(queues: List[Any], processors: Optional[Processors], config: Any, plugins: Sequence[Any],
             recorder: _Recorder) -> List[Any]:
    """The workers of the drained queues, with the processors and plugins the worker
    command would give them."""
    from ...plugins.host import PluginHost, make_plugin_manager
    from ...worker.worker import Worker
    from ..config import Config, load_config
    from ..runner import build_plugin_host

    names = [q.name for q in queues]
    extra: List[Any] = [recorder, *plugins]
    if processors:
        extra.append(_Routes(processors, names))
    found: Dict[str, Any] = {}
    options: Dict[str, Dict[str, Any]] = {}
    if config is not None:
        cfg = config if isinstance(config, Config) else load_config(str(config))
        cfg.activate_paths()
        host, found = build_plugin_host(cfg, tuple(extra), check_processors=False)
        options = {name: dict(q.options) for name, q in cfg.queues.items()}
    else:
        host = PluginHost(make_plugin_manager(extra, entry_points=False))
    workers = []
    for q in queues:
        opts = dict(DRAIN_OPTIONS)
        opts.update(options.get(q.name, {}))
        workers.append(Worker(q.name, processor=found.get(q.name), connection=q.client, prefix=q.prefix,
                              plugins=host, **opts))
    return workers


def _left(queues: List[Any], delayed: str) -> int:
    """Jobs still to run: waiting, active, prioritized (and delayed, with ``run``)."""
    states = ("waiting", "active", "prioritized") + (("delayed",) if delayed == "run" else ())
    total = 0
    for q in queues:
        if delayed == "run":
            q.promote_jobs()
        total += sum(q.get_job_counts(*states).values())
    return total


def drain(queue: Any, processors: Optional[Processors] = None, *, config: Any = None, timeout: float = 10.0,
          delayed: str = "run", raise_errors: bool = False, plugins: Sequence[Any] = (),
          before_poll: Optional[Callable[[], int]] = None) -> DrainResult:
    """Run the jobs of ``queue`` (a :class:`~echomq_gevent.queue.Queue`, or a list of
    them: a flow's children in other queues) with real workers in this process until
    none is waiting, active, prioritized or (``delayed="run"``) delayed; return what
    happened.

    ``processors``: ``{job name: fn}`` (on every drained queue) or ``{(queue, job name):
    fn}``, ``"*"`` for every name; ``config``: a YAML file's path (or a loaded
    ``Config``) whose plugins and ``processor:`` lines serve the queues, with the
    queues' worker options. A job no processor serves fails with the worker's reason.
    ``raise_errors``: stop at the first exception a processor raises (a retry's too)
    and raise it here, with its traceback. ``timeout``: seconds before
    :class:`DrainTimeout` (naming the jobs still active, which go back to wait).
    ``plugins``: plugin objects the workers get besides (a framework's processors and
    per-job context). ``before_poll``: called in the calling greenlet before each look
    at the queues; returns how many jobs it added (the testing face relays outbox rows
    with it). Works whether or not the process is patched by gevent: drain waits with
    ``gevent.sleep``, and the workers' connections are gevent's.
    """
    if delayed not in DELAYED_MODES:
        raise ValueError(f"drain(delayed=...): one of {', '.join(DELAYED_MODES)}, got {delayed!r}")
    if processors is None and config is None and not plugins:
        raise ConfigError("drain(): pass processors={job name: fn} or config='worker.yaml' (the file whose "
                          "plugins and processor: lines serve the queues)")
    queues = _queues(queue)
    recorder = _Recorder()
    workers = _workers(queues, processors, config, plugins, recorder)
    for w in workers:
        w.start()
    deadline = time.monotonic() + timeout
    quiet = 0
    try:
        while True:
            if raise_errors and recorder.first_error is not None:
                break
            added = before_poll() if before_poll is not None else 0
            busy = added or any(len(w.active_jobs) for w in workers)
            quiet = quiet + 1 if not busy and _left(queues, delayed) == 0 else 0
            if quiet >= 2:  # twice in a row, a poll apart: nothing between a finish and a refill
                break
            if time.monotonic() > deadline:
                active = [(q.name, j.id) for q in queues for j in q.get_jobs(["active"])]
                gevent.joinall([gevent.spawn(w.close, 0) for w in workers])
                workers = []
                raise DrainTimeout(f"drain(): {timeout} s passed with {len(active)} job(s) still active "
                                   f"({', '.join(f'{q}:{i}' for q, i in active) or 'none'}) and "
                                   f"{_left(queues, delayed)} left to run; the active ones went back to "
                                   f"wait", active, recorder.result)
            gevent.sleep(POLL_S)
    finally:
        gevent.joinall([gevent.spawn(w.close, 1) for w in workers])
    if raise_errors and recorder.first_error is not None:
        raise recorder.first_error
    return recorder.result

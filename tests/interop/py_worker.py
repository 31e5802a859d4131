"""Run our ``echomq_gevent.Worker`` in its own process, driven like ``node/bullmq_tool.js``.

Usage: ``python py_worker.py '<json command>'`` with
``{"redis": url, "prefix": p, "queue": q, "workerOpts": {...}, "behaviour": {...},
"byName": {...}, "stopAfter": n, "maxMs": ms}``.

``workerOpts`` are our Worker's options (``concurrency``, ``drain_delay``, ``lock_duration``,
``stalled_interval``, ``max_stalled_count``, ``name``...). ``behaviour`` (or
``byName[job.name]``) drives the processor with the same keys as the Node tool:
``sleepMs``, ``failTimes``, ``failMessage``, ``unrecoverable``, ``progress``, ``log``,
``busyMs`` (CPU work that never yields), ``crash`` (``os._exit(3)`` while holding the
job), ``delayOnceMs`` / ``rateLimitOnceMs``
(first start only: ``job.move_to_delayed`` + ``DelayedError``, ``worker.rate_limit`` +
``RateLimitError``), ``return``, ``returnData``, ``waitChildren`` (the parent step pattern:
on the first run, after adding ``spawnChildren: {queue, n}`` children if asked,
``job.move_to_waiting_children()`` + ``WaitingChildrenError``; then it returns
``job.get_children_values()``), ``returnChildrenValues``.

It prints one JSON line per event, each with ``t`` (ms since the epoch): ``ready``,
``process`` (our Job as Node names its fields, at processor start), ``active``,
``completed``, ``failed`` (final), ``retried``, ``stalled``, ``lock_lost``,
``handed_back``, ``error``, ``exit``. ``cancel <jobId> [reason]`` on stdin calls
``worker.cancel_job`` (answered by ``cancelled`` or ``cancel-refused``). ``stop`` on stdin (or stdin closing) closes the
worker gracefully.

The test process itself is not monkey-patched; this one is, first thing, as a real
deployment would be.
"""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any, Dict  # noqa: E402

import gevent  # noqa: E402
import gevent.socket  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the source checkout

from echomq_gevent import hookimpl  # noqa: E402
from echomq_gevent import Queue, WaitingChildrenError  # noqa: E402
from echomq_gevent.errors import DelayedError, RateLimitError, UnrecoverableError  # noqa: E402
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager  # noqa: E402
from echomq_gevent.worker.worker import Worker  # noqa: E402


_READY = {"sent": False}


def emit(obj: Dict[str, Any]) -> None:
    """Print one stamped JSON line (job greenlets and the main greenlet share stdout).

    "ready" always comes first: any earlier event proves the worker is running."""
    if obj.get("event") == "ready":
        if _READY["sent"]:
            return
        _READY["sent"] = True
    elif not _READY["sent"] and obj.get("event") not in ("stopping", "exit", "error"):
        emit({"event": "ready"})
    line = dict(t=int(time.time() * 1000), **obj)
    sys.stdout.write(json.dumps(line, default=repr) + "\n")
    sys.stdout.flush()


def job_view(job: Any) -> Dict[str, Any]:
    """Our Job's fields under Node's names, so tests compare them the same way."""
    return {
        "id": job.id, "name": job.name, "data": job.data, "opts": job.opts,
        "progress": job.progress, "attemptsMade": job.attempts_made,
        "attemptsStarted": job.attempts_started, "stalledCounter": job.stalled_counter,
        "returnvalue": job.returnvalue, "failedReason": job.failed_reason,
        "stacktrace": job.stacktrace, "timestamp": job.timestamp,
        "processedOn": job.processed_on, "finishedOn": job.finished_on, "delay": job.delay,
        "priority": job.priority, "processedBy": job.processed_by,
        "deferredFailure": job.deferred_failure, "token": job.token,
    }


class Reporter:
    """Telemetry plugin: one JSON line per lifecycle event; counts final outcomes."""

    def __init__(self, stop_after: int, on_done: Any) -> None:
        self.stop_after = stop_after
        self.on_done = on_done
        self.outcomes = 0

    def _outcome(self) -> None:
        self.outcomes += 1
        if self.stop_after and self.outcomes >= self.stop_after:
            self.on_done("stopAfter")

    @hookimpl
    def echomq_job_active(self, worker: Any, job: Any) -> None:
        emit({"event": "active", "jobId": job.id})

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        emit({"event": "completed", "jobId": job.id, "result": result, "job": job_view(job)})
        self._outcome()

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        emit({"event": "failed", "jobId": job.id, "error": str(error), "name": type(error).__name__,
              "job": job_view(job)})
        self._outcome()

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException,
                           delay_ms: int) -> None:
        emit({"event": "retried", "jobId": job.id, "error": str(error), "delay": delay_ms})

    @hookimpl
    def echomq_job_stalled(self, worker: Any, queue: str, job_id: str) -> None:
        emit({"event": "stalled", "jobId": job_id})

    @hookimpl
    def echomq_job_lock_lost(self, worker: Any, job: Any) -> None:
        emit({"event": "lock_lost", "jobId": job.id})

    @hookimpl
    def echomq_job_handed_back(self, worker: Any, job: Any) -> None:
        emit({"event": "handed_back", "jobId": job.id})


def make_processor(cmd: Dict[str, Any], worker_box: Dict[str, Any]) -> Any:
    by_name = cmd.get("byName") or {}

    def process(job: Any) -> Any:
        how = by_name.get(job.name) or cmd.get("behaviour") or {}
        emit({"event": "process", "jobId": job.id, "job": job_view(job)})
        if how.get("crash"):
            os._exit(3)  # a worker dying while it holds the job's lock
        for value in how.get("progress") or []:
            job.update_progress(value)
        for line in how.get("log") or []:
            job.log(line)
        if how.get("sleepMs"):
            gevent.sleep(how["sleepMs"] / 1000.0)
        if how.get("busyMs"):
            # Hog the hub: pure-Python work that never yields to other greenlets.
            end = time.monotonic() + how["busyMs"] / 1000.0
            spins = 0
            while time.monotonic() < end:
                spins += 1
        if how.get("delayOnceMs") and job.attempts_started == 1:
            job.move_to_delayed(int(time.time() * 1000) + how["delayOnceMs"])
            raise DelayedError()
        if how.get("rateLimitOnceMs") and job.attempts_started == 1:
            worker_box["w"].rate_limit(how["rateLimitOnceMs"])
            raise RateLimitError()
        if how.get("unrecoverable"):
            raise UnrecoverableError(how.get("failMessage") or "planned unrecoverable failure")
        if how.get("failTimes") and job.attempts_made < how["failTimes"]:
            raise RuntimeError(how.get("failMessage") or f"planned failure {job.attempts_made + 1}")
        if how.get("waitChildren") and not (isinstance(job.data, dict) and job.data.get("waited")):
            # The step pattern: remember the step in the job's data, then wait for the children.
            job.update_data(dict(job.data or {}, waited=True))
            spawn = how.get("spawnChildren")
            if spawn:
                with Queue(spawn["queue"], connection=cmd["redis"], prefix=cmd.get("prefix", "bull")) as target:
                    for i in range(spawn["n"]):
                        target.add("spawned", {"i": i},
                                   {"parent": {"id": job.id, "queue": job.queue_qualified_name}})
            if job.move_to_waiting_children():
                raise WaitingChildrenError()
        if how.get("waitChildren") or how.get("returnChildrenValues"):
            return job.get_children_values()
        if how.get("returnData"):
            return job.data
        return how.get("return")

    return process


def main() -> int:
    cmd = json.loads(sys.argv[1])
    state: Dict[str, Any] = {"stopping": None}
    worker_box: Dict[str, Worker] = {}

    def stop(reason: str) -> None:
        if state["stopping"] is None:
            state["stopping"] = reason
            emit({"event": "stopping", "reason": reason})
            gevent.spawn(worker_box["w"].close)

    reporter = Reporter(int(cmd.get("stopAfter") or 0), stop)
    host = PluginHost(make_plugin_manager([reporter]))
    worker = Worker(cmd["queue"], make_processor(cmd, worker_box), connection=cmd["redis"],
                    prefix=cmd.get("prefix", "bull"), plugins=host, **(cmd.get("workerOpts") or {}))
    worker_box["w"] = worker

    def watch_stdin() -> None:
        fd = sys.stdin.fileno()
        buf = b""
        while True:
            gevent.socket.wait_read(fd)
            chunk = os.read(fd, 4096)
            if not chunk:
                stop("stdin-closed")
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                text = line.strip().decode("utf-8", "replace")
                if text == "stop":
                    stop("stdin")
                elif text.startswith("cancel "):  # "cancel <jobId> [reason]"
                    parts = text.split(" ", 2)
                    try:
                        worker.cancel_job(parts[1], parts[2] if len(parts) > 2 else None)
                        emit({"event": "cancelled", "jobId": parts[1]})
                    except Exception as exc:  # reported, the worker goes on
                        emit({"event": "cancel-refused", "jobId": parts[1], "error": str(exc)})

    gevent.spawn(watch_stdin)
    if cmd.get("maxMs"):
        gevent.spawn_later(cmd["maxMs"] / 1000.0, stop, "maxMs")
    runner = worker.start()

    def announce() -> None:
        # "ready" once the fetch loop has talked to Redis (or the worker died trying).
        while worker.last_fetch_at is None and not runner.dead:
            gevent.sleep(0.005)
        emit({"event": "ready", "workerId": worker.id})

    gevent.spawn(announce)
    try:
        runner.get()
    except Exception as exc:  # the worker itself must never die; report it if it does
        emit({"event": "error", "error": repr(exc), "stack": traceback.format_exc()})
        return 1
    emit({"event": "exit", "reason": state["stopping"], "outcomes": reporter.outcomes,
          "counters": worker.counters})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``echomq-gevent -c FILE replay QUEUE JOB_ID [--pdb]``: run a stored job again, here.

For the failed job a developer is looking at in the dashboard: the job's data, options
and stack trace are read from Redis, its processor (found as the worker finds it: the
queue's ``processor:`` line or the file's plugins) runs in this process, and the result,
or the new traceback beside the stored one, is printed; ``--pdb`` stops in the debugger
where the processor raised. Nothing in Redis changes: the job the processor gets keeps
its progress, log lines and data updates to itself (they are printed), and refuses the
calls that would move it.
"""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any, List, Optional, TextIO

from ..queue.job import Job

__all__ = ["ReplayJob", "replay", "EXIT_FAILED"]

#: the processor raised (the other codes are the command's: 0 done, 2 the job or the config)
EXIT_FAILED = 1
_EXIT_INPUT = 2


class ReplayJob(Job):
    """A job read from Redis whose writes stay in this process."""

    __slots__ = ("writes",)

    @classmethod
    def detached(cls, job: Job) -> "ReplayJob":
        copy = cls.__new__(cls)
        for name in Job.__slots__:
            if name != "__weakref__" and hasattr(job, name):
                setattr(copy, name, getattr(job, name))
        copy.writes = []
        return copy

    def update_progress(self, value: Any) -> None:
        self.progress = value
        self.writes.append(f"progress {json.dumps(value, default=repr)}")

    def log(self, line: str) -> int:
        self.writes.append(f"log {line}")
        return len(self.writes)

    def update_data(self, data: Any) -> None:
        self.data = data
        self.writes.append(f"data {json.dumps(data, default=repr)}")

    def _refuse(self, what: str) -> Any:
        raise RuntimeError(f"replay changes nothing in Redis: job.{what}() is not run")

    def move_to_delayed(self, timestamp_ms: int, token: Optional[str] = None) -> None:
        self._refuse("move_to_delayed")

    def retry(self, *args: Any, **kwargs: Any) -> None:
        self._refuse("retry")

    def promote(self) -> None:
        self._refuse("promote")

    def change_delay(self, delay_ms: int) -> None:
        self._refuse("change_delay")

    def change_priority(self, priority: int = 0, lifo: bool = False) -> None:
        self._refuse("change_priority")

    def remove(self, remove_children: bool = True) -> None:
        self._refuse("remove")


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.rstrip("\n").splitlines())


def replay(cfg: Any, url: str, queue_name: str, job_id: str, use_pdb: bool = False,
           out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run job ``job_id`` of ``queue_name`` through the processor of ``cfg`` in this
    process; returns 0 when it returned, 1 when it raised, 2 when the job or its
    processor cannot be had (a message on ``err`` says why; nothing ran)."""
    from ..queue.queue import Queue
    from .runner import build_plugin_host

    where = f"replay {queue_name} {job_id}"
    queue = Queue(queue_name, connection=url, prefix=cfg.prefix)
    try:
        stored = queue.get_job(job_id)
        if stored is None:
            print(f"echomq-gevent {where}: no job {job_id!r} on queue {queue_name!r} (prefix {cfg.prefix!r}); "
                  f"nothing ran", file=err)
            return _EXIT_INPUT
        if stored.decode_error:
            print(f"echomq-gevent {where}: the stored job cannot be read: {stored.decode_error}; nothing ran",
                  file=err)
            return _EXIT_INPUT
        host, processors = build_plugin_host(cfg, check_processors=False)
        fn = processors.get(queue_name) or host.get_processor(queue_name, stored.name)
        if fn is None:
            print(f"echomq-gevent {where}: no processor for job name {stored.name!r} on queue {queue_name!r}: "
                  f"set processor: in the queue's config, or load a plugin that registers one; nothing ran", file=err)
            return _EXIT_INPUT
        job = ReplayJob.detached(stored)
        print(f"replaying job {job.id} ({job.name!r}) of queue {queue_name!r}: attempts made {job.attempts_made}"
              + (f", failed: {job.failed_reason}" if job.failed_reason else ""), file=out)
        print(f"data: {json.dumps(job.data, default=repr)}", file=out)
        try:
            with host.job_context(None, job):
                value = fn(job)
        except Exception as exc:
            _report_writes(job.writes, out)
            stored_trace = [t for t in stored.stacktrace if isinstance(t, str)]
            if stored_trace:
                print("stored stack trace (its last attempt):", file=out)
                out.write(_indent(stored_trace[-1]))
            print("new traceback (this run):", file=out)
            out.write(_indent("".join(traceback.format_exception(type(exc), exc, exc.__traceback__))))
            if use_pdb:
                import pdb

                pdb.post_mortem(exc.__traceback__)
            return EXIT_FAILED
        _report_writes(job.writes, out)
        print(f"result: {json.dumps(value, default=repr)}", file=out)
        return 0
    finally:
        queue.close()


def _report_writes(writes: List[str], out: TextIO) -> None:
    for line in writes:
        print(f"(kept here, not written) {line}", file=out)

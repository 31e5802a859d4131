"""Processors for the ``offload: process`` tests, importable in the worker's child
processes (they get the test process' ``sys.path``) as ``integration.offload_helpers``.

:func:`dispatch` does what the job's name says; the tests pick behaviour by job name.
"""
from __future__ import annotations

import os
import time
from typing import Any

from echomq_gevent.errors import UnrecoverableError


def _burn_until(deadline: float) -> int:
    """Pure-Python CPU work until ``deadline`` (monotonic); returns the loop count."""
    n = 0
    while time.monotonic() < deadline:
        n += sum(i * i for i in range(200)) & 1
    return n


def rendezvous(job: Any) -> Any:
    """Burn CPU while waiting for ``data["n"]`` jobs to be running at once: each writes
    its pid into ``data["dir"]`` and spins until it sees ``n`` files (or fails after
    ``data["within"]`` s). Returns this process' pid and the pids it saw."""
    folder, n = job.data["dir"], job.data["n"]
    pid = os.getpid()
    with open(os.path.join(folder, f"{job.id}-{pid}"), "w") as fh:
        fh.write(str(pid))
    deadline = time.monotonic() + float(job.data.get("within", 30))
    while time.monotonic() < deadline:
        names = os.listdir(folder)
        if len(names) >= n:
            return {"pid": pid, "seen": sorted(int(name.rsplit("-", 1)[1]) for name in names)}
        _burn_until(time.monotonic() + 0.005)
    raise TimeoutError(f"only {len(os.listdir(folder))} of {n} jobs ran at once")


def dispatch(job: Any) -> Any:
    """By job name: echo, fail, unrecoverable, abort, segv, exit3, hang, talk, bad_return, huge_int."""
    name = job.name
    if name == "echo":
        return {"data": job.data, "pid": os.getpid(), "attempts_made": job.attempts_made}
    if name == "fail":
        raise ValueError(f"bad input {job.data.get('x')!r}")
    if name == "unrecoverable":
        raise UnrecoverableError("give up now")
    if name == "abort":
        job.log(f"pid {os.getpid()}")
        os.abort()
    if name == "segv":
        import ctypes

        job.log(f"pid {os.getpid()}")
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if name == "exit3":
        os._exit(3)
    if name == "hang":
        job.log(f"pid {os.getpid()}")
        time.sleep(60)
        return "woke"
    if name == "talk":
        job.update_progress({"step": 1})
        count = job.log("hello from the child")
        job.update_data(dict(job.data, seen=True))
        job.update_progress(100)
        return {"log_count": count, "pid": os.getpid()}
    if name == "bad_return":
        return object()
    if name == "huge_int":
        return 2 ** 70
    raise LookupError(f"no behaviour for job name {name!r}")


def replaced(job: Any) -> Any:
    return "first"


#: the first ``replaced``: its name now leads to the second, so a child would run another function
shadowed_original = replaced


def replaced(job: Any) -> Any:  # noqa: F811
    return "second"

"""The child's side of the supervisor: one worker process started by
:mod:`echomq_gevent.host.supervisor`.

The child is the ordinary command (``python -m echomq_gevent -c FILE``) run with the
hidden ``--supervised-child INDEX`` flag; it runs the file's queues through the one
:class:`~echomq_gevent.host.runner.Runner` as a lone process does, and besides:

- counts the jobs it finishes and, past ``max_jobs_per_process`` (plus up to a tenth of
  it, drawn at random so children started together do not recycle together), recycles:
  tells the parent (which starts the replacement at once), drains with the Runner's own
  drain and exits :data:`EXIT_RECYCLE`;
- checks its resident memory every second and recycles the same way past
  ``max_memory_per_process`` MB;
- notices the parent's death (``PR_SET_PDEATHSIG`` on Linux turns it into a SIGTERM,
  which drains through the usual signal handling; a ``getppid()`` check every second
  is the portable fallback) and drains;
- reports ``ready`` and, every two seconds, its counters (jobs done, RSS) to the parent as JSON lines on the
  pipe whose write end the parent passed as ``ECHOMQ_SUPERVISOR_FD``.

Everything here runs on the child's hub: the hooks on job greenlets, the watch loop on
a greenlet of its own.
"""
from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys
import time
from typing import Any, Dict, Optional

import gevent

from ..plugins.hookspecs import hookimpl

log = logging.getLogger("echomq_gevent.supervised")

__all__ = ["SupervisedChild", "EXIT_RECYCLE", "rss_mb", "FD_ENV", "PARENT_ENV"]

#: The exit code of a child that recycled on purpose (the parent does not count it as a crash).
EXIT_RECYCLE = 4
#: Environment variables the parent sets for a child: the report pipe's write end, its own pid.
FD_ENV = "ECHOMQ_SUPERVISOR_FD"
PARENT_ENV = "ECHOMQ_SUPERVISOR_PID"
#: Seconds between two looks at the memory and the parent (and reports of the counters).
WATCH_INTERVAL = 1.0
#: Linux prctl(2) option: the signal this process receives when its parent dies.
_PR_SET_PDEATHSIG = 1


def rss_mb() -> float:
    """This process' resident memory in MB: the current figure from ``/proc/self/statm``
    on Linux, else the peak from ``getrusage`` (the best the platform offers)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            resident_pages = int(fh.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def ask_for_parent_death_signal(signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies; False where
    ``prctl`` is not available (the ``getppid()`` check then does the work alone)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class SupervisedChild:
    """A plugin (it counts finished jobs through the telemetry hooks) and the watcher of
    one supervised worker process. Built by the command before the plugin host, given
    the Runner by :meth:`start` once the workers run."""

    def __init__(self, index: int, max_jobs: Optional[int] = None, max_memory_mb: Optional[int] = None,
                 fd: Optional[int] = None, parent_pid: Optional[int] = None) -> None:
        self.__name__ = "echomq_gevent.supervised"  # the name pluggy lists it under
        self.index = index
        self.max_jobs = max_jobs
        self.max_memory_mb = max_memory_mb
        #: the job count after which this process recycles (jittered once, at start)
        self.job_limit: Optional[int] = None
        if max_jobs is not None:
            self.job_limit = max_jobs + random.randint(0, max_jobs // 10)
        self.fd = fd
        self.parent_pid = parent_pid
        self.done = 0
        self.started_at = time.time()
        #: why this process recycles (None while it does not)
        self.recycling: Optional[str] = None
        self.parent_gone = False
        self.runner: Any = None
        self._watcher: Optional[gevent.Greenlet] = None

    @classmethod
    def from_env(cls, index: int, cfg: Any) -> "SupervisedChild":
        """The child of ``cfg`` (its recycling limits) reporting where the parent said."""
        fd = os.environ.pop(FD_ENV, None)  # not passed on to what the processors start
        parent = os.environ.pop(PARENT_ENV, None)
        child = cls(index, cfg.max_jobs_per_process, cfg.max_memory_per_process,
                    fd=int(fd) if fd and fd.isdigit() else None,
                    parent_pid=int(parent) if parent and parent.isdigit() else None)
        if child.fd is not None:
            try:
                os.set_blocking(child.fd, False)  # a report never blocks the hub; one that does not fit is dropped
            except OSError:
                child.fd = None
        return child

    @property
    def label(self) -> str:
        """How the logs name this process: ``<index>/<pid>``."""
        return f"{self.index}/{os.getpid()}"

    # -- the jobs it finishes (job greenlets) ---------------------------------------------
    def _finished(self) -> None:
        self.done += 1
        if self.job_limit is not None and self.done >= self.job_limit and self.recycling is None:
            # at once, on this job greenlet: every slot that frees from now on stays empty
            self.recycle(f"{self.done} jobs done (max_jobs_per_process {self.max_jobs}, "
                         f"this process' share drawn as {self.job_limit})")

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Any, result: Any, duration_ms: float) -> None:
        self._finished()

    @hookimpl
    def echomq_job_failed(self, worker: Any, job: Any, error: BaseException) -> None:
        self._finished()

    @hookimpl
    def echomq_job_retried(self, worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
        self._finished()

    # -- running ------------------------------------------------------------------------
    def start(self, runner: Any, death_signal: bool = True) -> None:
        """Called by the command on the main greenlet once ``runner`` has started: ask for
        the parent-death signal (unless ``death_signal`` is False: the ``getppid()`` check
        alone), report ``ready`` and start the watch loop."""
        self.runner = runner
        if death_signal:
            ask_for_parent_death_signal(signal.SIGTERM)
        self.report("ready", queues=list(runner.queue_names), started_at=self.started_at, jobs=0,
                    rss_mb=round(rss_mb(), 1))
        self._watcher = gevent.spawn(self._watch)

    def stop(self) -> None:
        """Called by the command once the workers have stopped (and its signal handlers
        are gone): a SIGTERM the parent sends from now on finds nothing left to drain, so
        it is ignored rather than killing the exiting process."""
        if self._watcher is not None:
            self._watcher.kill(block=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        self.report("stopped", jobs=self.done)

    def exit_code(self) -> Optional[int]:
        """:data:`EXIT_RECYCLE` when this process recycled (else None: the usual code)."""
        return EXIT_RECYCLE if self.recycling is not None and not self.parent_gone else None

    def recycle(self, reason: str) -> None:
        """Stop taking jobs and drain (the Runner's drain: in-flight jobs finish within
        ``shutdown_timeout`` or are handed back), telling the parent first so that it
        starts the replacement while this one drains."""
        if self.recycling is not None or self.runner is None or self.runner.stopping:
            return
        self.recycling = reason
        log.info("recycling: %s; draining", reason)
        self.report("recycle", reason=reason, jobs=self.done)
        self.runner.drain(None, "recycle")

    def _watch(self) -> None:
        """Every second (a little jittered): is the parent alive, is memory within the
        limit; every few seconds, the counters to the parent."""
        last_report = 0.0
        while not self.runner.stopping:
            gevent.sleep(WATCH_INTERVAL * random.uniform(0.8, 1.2))
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                self.parent_gone = True
                log.warning("the supervisor (pid %d) is gone: draining", self.parent_pid)
                self.runner.drain(None, "supervisor gone")
                return
            rss = rss_mb()
            if self.max_memory_mb is not None and rss > self.max_memory_mb:
                self.recycle(f"resident memory {rss:.0f} MB > max_memory_per_process {self.max_memory_mb}")
                return
            now = time.monotonic()
            if now - last_report >= 2 * WATCH_INTERVAL:
                last_report = now
                self.report("stats", jobs=self.done, rss_mb=round(rss, 1))

    def report(self, event: str, **fields: Any) -> None:
        """One JSON line to the parent; dropped when there is no parent pipe or it is full."""
        if self.fd is None:
            return
        message: Dict[str, Any] = {"event": event, "pid": os.getpid(), "index": self.index}
        message.update(fields)
        try:
            os.write(self.fd, (json.dumps(message) + "\n").encode())
        except (BlockingIOError, BrokenPipeError):
            pass
        except OSError as exc:
            log.debug("cannot report %s to the supervisor: %s", event, exc)

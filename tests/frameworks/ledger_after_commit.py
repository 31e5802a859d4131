"""The ledger fault tests' plugin for their worker processes: a job context whose clean
exit (after the processor and its ledger row committed, before the job's finish is sent
to Redis) prints ``committed JOB_ID`` and sends this process ``action`` (SIGKILL, or
SIGSTOP for a test that restarts Redis before letting it go on)."""
import contextlib
import os
import signal

from echomq_gevent.plugins.hookspecs import hookimpl


class AfterCommit:
    __name__ = "ledger-after-commit"

    def __init__(self, action: int = signal.SIGKILL) -> None:
        self.action = action

    @hookimpl
    def echomq_job_context(self, worker, job):
        @contextlib.contextmanager
        def scope():
            yield
            print(f"committed {job.id}", flush=True)
            os.kill(os.getpid(), self.action)
        return scope()


def from_environment():
    """The plugin the environment asks for (``LEDGER_KILL_AFTER_COMMIT=1``,
    ``LEDGER_STOP_AFTER_COMMIT=1``), or None."""
    if os.environ.get("LEDGER_KILL_AFTER_COMMIT") == "1":
        return AfterCommit(signal.SIGKILL)
    if os.environ.get("LEDGER_STOP_AFTER_COMMIT") == "1":
        return AfterCommit(signal.SIGSTOP)
    return None

"""The supervisor: ``echomq-gevent -c FILE --processes N`` (or ``processes: N``, or a
recycling limit) runs N worker processes and keeps them running.

The parent is kept boring: it has read and validated the file, and then only starts
children, waits for them, reads their one-line reports and forwards signals. It holds
no Redis connection (but the one its Prometheus port reads the queues' gauges on,
:class:`SharedMetrics`), no plugin host, no worker; it imports no plugin or processor of
the user's (under a framework's worker command it has loaded the app, which is how it
read the settings, but it still builds nothing of the workers). It is the same command,
so gevent has patched it like any run of the command; its hub runs nothing but the
greenlets below.

Each child is a fresh interpreter running the same command (the framework commands:
their own command line) with the hidden ``--supervised-child INDEX`` flag
(:mod:`echomq_gevent.host.supervised` is its side): a new ``exec`` rather than a fork, so a child never inherits a patched hub, a lock held
by a thread or a half-used socket, and a child started after SIGHUP runs the code on
disk now (a deploy needs no restart of the parent).

- **Restart**: a child that exits unexpectedly (any exit but :data:`EXIT_RECYCLE`, or a
  signal) is restarted after a backoff that doubles with each failure in a row (0.5 s up
  to 30 s; a child that stayed up :data:`STABLE_AFTER` s resets it); the parent logs
  the exit code or signal, and the crash loop once the delay reaches its cap.
- **Recycling**: a child that reaches its limit tells the parent (``recycle``) as it
  begins to drain; the parent starts the replacement at once, so for a while the slot
  has two processes and capacity never drops, with one process as with many.
- **Signals**: SIGTERM/SIGINT drains every child (each gets one SIGTERM: its Runner's
  drain) and exits 0 once all have drained; a second signal sends a second SIGTERM
  (the children hand their jobs back at once). SIGHUP reads the file again: an invalid
  file is logged and the running children stay; a valid one replaces the children one
  by one, each old one draining only once its replacement reported ``ready``.
- **Parent death**: the children are in sessions of their own (Ctrl-C on a terminal
  reaches only the parent, which drains them once); each asks Linux for a SIGTERM when
  the parent dies, and checks ``getppid()`` every second besides (all there is where
  ``prctl`` is not).

Everything here runs on greenlets of the parent's hub: one per child waiting for its
exit, one per child reading its reports, the signal handlers, the restart timers.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import gevent
import gevent.event
import gevent.os
import gevent.subprocess

from .config import Config, load_config
from .process_state import remove_stale, state_path, write_state
from .supervised import EXIT_RECYCLE, FD_ENV, PARENT_ENV
from ..errors import ConfigError

log = logging.getLogger("echomq_gevent.supervisor")

__all__ = ["Supervisor", "ChildProcess", "SharedMetrics", "describe_exit", "restart_delay", "EXIT_RECYCLE"]

#: Restart backoff: the first delay, its cap (seconds), and how long a child must have
#: stayed up for the next failure to count as a first one again.
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 30.0
STABLE_AFTER = 30.0
#: How long a child started by SIGHUP may take to report ready before the reload gives up.
READY_TIMEOUT = 60.0
#: Seconds a recycled or replaced child may take beyond its longest ``shutdown_timeout``
#: (the hand-back, closing connections) before the parent kills it: its replacement runs
#: already, and the stalled check recovers whatever it still held.
RETIRE_GRACE = 30.0
#: The command's exit codes the supervisor passes on (see :mod:`echomq_gevent.host.cli`).
EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_REDIS = 0, 1, 2, 3


def describe_exit(code: Optional[int]) -> str:
    """``exit code 1``, ``killed by SIGKILL``, ... for a ``Popen.returncode``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == EXIT_RECYCLE:
        return f"exit code {code} (recycled)"
    return f"exit code {code}"


def restart_delay(failures: int) -> float:
    """Seconds before the restart after ``failures`` unexpected exits in a row (1, 2, ...)."""
    return min(BACKOFF_CAP, BACKOFF_FIRST * (2 ** max(0, failures - 1)))


class SharedMetrics:
    """The Prometheus plugin's metrics summed over the worker processes.

    When the file loads ``echomq_gevent.contrib.prometheus``, the parent turns on
    prometheus_client's multiprocess mode for its children (``PROMETHEUS_MULTIPROC_DIR``:
    the one set, else a folder of its own, removed at exit; stale files of an earlier run
    are wiped, prometheus_client's rule), drops the live gauges of each child that exits,
    and, with ``ECHOMQ_PROMETHEUS_PORT`` set, serves the sum itself on that port (a child
    would lose the port when recycled); the children then do not serve it.

    There it also serves ``gauges`` (:class:`~echomq_gevent.host.queue_gauges.QueueGauges`
    of the file's queues: counts, the oldest ready job's age, late schedulers), read from
    Redis at each scrape, so one process per host reads them, not every child. This is
    the one Redis connection the parent holds, made at the first scrape, on the thread
    that answers it.
    """

    PLUGIN = "echomq_gevent.contrib.prometheus"
    DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
    PORT_ENV = "ECHOMQ_PROMETHEUS_PORT"

    def __init__(self, gauges: Any = None) -> None:
        self.directory = ""
        self.owned = False
        self.port: Optional[int] = None
        self.gauges = gauges

    @classmethod
    def wanted(cls, cfg: Config) -> bool:
        return any(spec.split(":")[0] == cls.PLUGIN for spec in cfg.plugins)

    def prepare(self, env: Dict[str, str]) -> None:
        """Before the first child: the folder, in ``env`` and this process' environment
        (prometheus_client reads it at import, which happens here and not before)."""
        self.directory = env.get(self.DIR_ENV) or ""
        if not self.directory:
            self.directory = tempfile.mkdtemp(prefix="echomq-prometheus-")
            self.owned = True
        os.makedirs(self.directory, exist_ok=True)
        os.environ[self.DIR_ENV] = env[self.DIR_ENV] = self.directory
        for stale in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                os.remove(stale)
            except OSError:
                pass
        from prometheus_client import multiprocess  # noqa: F401 (imported once, now)

        port = env.pop(self.PORT_ENV, None)
        if port:
            from prometheus_client import CollectorRegistry, start_http_server

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            if self.gauges is not None:
                self.gauges.register_on(registry)
            start_http_server(int(port), registry=registry)
            self.port = int(port)
            log.info("Prometheus metrics of every worker process on port %d", self.port)

    def child_exited(self, pid: int) -> None:
        from prometheus_client import multiprocess

        try:
            multiprocess.mark_process_dead(pid, self.directory)
        except OSError as exc:
            log.debug("cannot drop the live gauges of pid %d: %s", pid, exc)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.directory, ignore_errors=True)


class ChildProcess:
    """One worker process of slot ``index`` (1..N): its ``Popen``, what it reported."""

    def __init__(self, index: int, proc: Any, report_fd: int) -> None:
        self.index = index
        self.proc = proc
        self.pid: int = proc.pid
        self.report_fd = report_fd
        self.started_at = time.time()
        self.started_mono = time.monotonic()
        self.ready = gevent.event.Event()
        self.exited = gevent.event.Event()
        #: set when the child drains on purpose (recycling, replaced by SIGHUP, shutdown)
        self.retiring: Optional[str] = None
        self.queues: List[str] = []
        self.jobs = 0
        self.rss_mb: Optional[float] = None
        #: it reported that its workers stopped (only its exit is left)
        self.drained = False

    @property
    def label(self) -> str:
        return f"process {self.index} (pid {self.pid})"

    def send(self, signum: int) -> None:
        if self.proc.returncode is None:
            try:
                self.proc.send_signal(signum)
            except OSError:
                pass


class Supervisor:
    """Runs ``processes`` children of the command for ``cfg`` and supervises them until
    SIGTERM/SIGINT. :meth:`run` is called by the command on its main greenlet and returns
    the exit code.

    ``child_args`` are the command-line options every child gets after ``-c FILE`` (log
    level and format); ``processes_override`` is ``--processes`` (it wins over the file,
    also after SIGHUP); ``demo`` makes child 1 enqueue the demo jobs.

    The framework commands run their own command line in the children instead:
    ``child_argv(index)`` gives it (with ``--supervised-child INDEX``), and
    ``reload_config`` is None (their settings cannot be read again in this process: on
    SIGHUP the new children read them, and a child that fails to start stops the reload).
    """

    def __init__(self, cfg: Config, processes: int, child_args: Sequence[str] = (),
                 processes_override: Optional[int] = None, demo: bool = False,
                 env: Optional[Dict[str, str]] = None, metrics: Optional[SharedMetrics] = None,
                 child_argv: Optional[Callable[[int], List[str]]] = None,
                 reload_config: Optional[Callable[[], Config]] = None) -> None:
        self.cfg = cfg
        self.processes = processes
        self.processes_override = processes_override
        self.child_args = list(child_args)
        self.demo = demo
        self.env = dict(os.environ if env is None else env)
        self.metrics = metrics
        self.child_argv = child_argv
        if reload_config is None and child_argv is None:
            reload_config = lambda: load_config(self.cfg.filename)  # noqa: E731
        self.reload_config = reload_config
        #: the current child of each slot
        self.current: Dict[int, ChildProcess] = {}
        #: every child still running (current, retiring, or started by a reload and not yet current)
        self.children: List[ChildProcess] = []
        self.failures: Dict[int, int] = {}
        self.shutting_down = 0  # signals received
        self.exit_code = EXIT_OK
        self.ever_ready = False
        self._done = gevent.event.Event()
        self._spawning = 0  # Popen calls under way (their children are not in ``children`` yet)
        self._restarts: Dict[int, gevent.Greenlet] = {}
        self._reloading: Optional[gevent.Greenlet] = None
        self._handlers: List[Any] = []
        self.started_at = time.time()
        #: the state file ``echomq-gevent status`` reads (:mod:`echomq_gevent.host.process_state`)
        self.state_file = state_path(cfg.filename)
        self._state_warned = False

    # -- the main greenlet ----------------------------------------------------------------
    def run(self) -> int:
        """Start the children, supervise them until every one has stopped after a
        SIGTERM/SIGINT (or a fatal start), return the exit code."""
        for signum, fn in ((signal.SIGTERM, self._on_stop), (signal.SIGINT, self._on_stop),
                           (signal.SIGHUP, self._on_hup)):
            self._handlers.append(gevent.signal_handler(signum, fn, signum))
        log.info("supervising %d worker process(es) of %s (pid %d)%s", self.processes, self.cfg.filename,
                 os.getpid(), self._limits())
        if self.metrics is not None:
            try:
                self.metrics.prepare(self.env)
            except (OSError, ImportError, ValueError) as exc:
                log.error("the Prometheus metrics of the worker processes cannot be shared: %s", exc)
                self.metrics.close()
                return EXIT_FAILURE
        remove_stale(self.cfg.filename)
        try:
            for index in range(1, self.processes + 1):
                if self.shutting_down:
                    break
                self._start_slot(index)
            self._done_if_all_gone()
            self._done.wait()
        finally:
            for h in self._handlers:
                h.cancel()
            try:
                os.remove(self.state_file)
            except OSError:
                pass
            if self.metrics is not None:
                self.metrics.close()
        log.info("every worker process has stopped; exiting %d", self.exit_code)
        return self.exit_code

    def _limits(self) -> str:
        parts = []
        if self.cfg.max_jobs_per_process is not None:
            parts.append(f"max_jobs_per_process {self.cfg.max_jobs_per_process}")
        if self.cfg.max_memory_per_process is not None:
            parts.append(f"max_memory_per_process {self.cfg.max_memory_per_process} MB")
        return f"; recycled at {', '.join(parts)}" if parts else ""

    # -- the state file -------------------------------------------------------------------
    def write_state(self) -> None:
        """Rewrite the state file from what the children reported (called on every change)."""
        def state_of(child: ChildProcess) -> str:
            if child.retiring is not None:
                return child.retiring.split(":")[0]
            return "running" if child.ready.is_set() else "starting"

        state = {
            "supervisor": {"pid": os.getpid(), "config": os.path.realpath(self.cfg.filename),
                           "processes": self.processes, "started_at": self.started_at,
                           "updated_at": time.time(), "stopping": bool(self.shutting_down)},
            "processes": [{"index": c.index, "pid": c.pid, "state": state_of(c), "queues": c.queues,
                           "jobs": c.jobs, "rss_mb": c.rss_mb, "started_at": c.started_at}
                          for c in sorted(self.children, key=lambda c: (c.index, c.started_at))],
        }
        try:
            write_state(self.state_file, state)
        except OSError as exc:
            if not self._state_warned:
                self._state_warned = True
                log.warning("cannot write the state file %s (status will not list the processes): %s",
                            self.state_file, exc)

    # -- children -------------------------------------------------------------------------
    def _argv(self, index: int) -> List[str]:
        if self.child_argv is not None:
            return self.child_argv(index)
        argv = [sys.executable, "-m", "echomq_gevent", "-c", self.cfg.filename, "--no-progress",
                "--supervised-child", str(index)] + self.child_args
        if self.demo:  # every child serves the demo queue; child 1 alone enqueues
            argv.append("--demo")
        return argv

    def _start_slot(self, index: int) -> Optional[ChildProcess]:
        """Start the child of slot ``index`` and make it the slot's current one (None when
        it could not start; a restart is then scheduled)."""
        child = self._spawn(index)
        if child is not None:
            self.current[index] = child
        return child

    def _spawn(self, index: int) -> Optional[ChildProcess]:
        """Start a child for slot ``index``; returns once it was exec'd (it reports
        ``ready`` later), or None when the system refused (no memory, no file descriptors:
        logged, and the slot is retried after the restart backoff). Popen yields to the
        hub while it waits for the exec, so a signal handler may run meanwhile: a child
        started across a SIGTERM is stopped at once."""
        proc: Any = None
        read_fd = -1
        self._spawning += 1
        try:
            read_fd, write_fd = os.pipe()
            env = dict(self.env)
            env[FD_ENV] = str(write_fd)
            env[PARENT_ENV] = str(os.getpid())
            try:
                proc = gevent.subprocess.Popen(self._argv(index), env=env, pass_fds=(write_fd,),
                                               start_new_session=True)
            finally:
                os.close(write_fd)
        except (OSError, ValueError) as exc:
            if read_fd >= 0:
                os.close(read_fd)
            if not self.shutting_down:
                self._schedule_restart(index, f"process {index}", f"could not be started ({exc})", 0.0)
        finally:
            self._spawning -= 1
        if proc is None:
            self._done_if_all_gone()  # stopping meanwhile: nothing of this one to wait for
            return None
        child = ChildProcess(index, proc, read_fd)
        self.children.append(child)
        log.info("started %s", child.label)
        gevent.spawn(self._read_reports, child)
        gevent.spawn(self._wait_exit, child)
        if self.shutting_down:  # a SIGTERM/SIGINT came while Popen waited for the exec: this one stops too
            child.retiring = "stopping"
            child.send(signal.SIGTERM)
        self.write_state()
        return child

    def _read_reports(self, child: ChildProcess) -> None:
        """The child's JSON lines, until it closes the pipe (it exited)."""
        os.set_blocking(child.report_fd, False)
        buffered = b""
        try:
            while True:
                data = gevent.os.nb_read(child.report_fd, 65536)
                if not data:
                    return
                buffered += data
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    try:
                        message = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(message, dict):
                        self._on_report(child, message)
        except OSError:
            return
        finally:
            os.close(child.report_fd)

    def _on_report(self, child: ChildProcess, message: Dict[str, Any]) -> None:
        event = message.get("event")
        if isinstance(message.get("jobs"), int):
            child.jobs = message["jobs"]
        if isinstance(message.get("rss_mb"), (int, float)):
            child.rss_mb = float(message["rss_mb"])
        if event == "ready":
            queues = message.get("queues")
            child.queues = [str(q) for q in queues] if isinstance(queues, list) else []
            child.ready.set()
            self.ever_ready = True
        elif event == "stopped":
            child.drained = True
        elif event == "recycle":
            self._retire(child, f"recycling: {message.get('reason', '')}")
        self.write_state()

    def _retire(self, child: ChildProcess, why: str) -> None:
        """``child`` is draining on purpose: free its slot and, unless stopping, start its
        replacement now (capacity never drops to zero, also with one process)."""
        if child.retiring is not None:
            return
        child.retiring = why
        self._watch_retiring(child)
        if self.current.get(child.index) is child:
            del self.current[child.index]
            if not self.shutting_down:
                replacement = self._start_slot(child.index)
                if replacement is not None:
                    log.info("%s is %s; %s takes its place", child.label, why, replacement.label)

    def _watch_retiring(self, child: ChildProcess) -> None:
        """Kill ``child`` (recycled or replaced) if it is still there well past its drain."""
        drain = max([float(q.options.get("shutdown_timeout") or 0) for q in self.cfg.queues.values()] + [0.0])
        limit = drain + RETIRE_GRACE

        def overdue() -> None:
            if child.proc.returncode is None and not self.shutting_down:
                log.warning("%s is still draining %.0f s after it began (%s); killing it", child.label, limit,
                            child.retiring)
                child.send(signal.SIGKILL)

        gevent.spawn_later(limit, overdue)

    def _wait_exit(self, child: ChildProcess) -> None:
        code = child.proc.wait()
        was_ready = child.ready.is_set()
        child.exited.set()
        if child in self.children:
            self.children.remove(child)
        if self.metrics is not None:
            self.metrics.child_exited(child.pid)
        how = describe_exit(code)
        if self.shutting_down:
            if code not in (0, EXIT_RECYCLE) and not (code == -signal.SIGTERM and (child.drained or not was_ready)):
                if self.exit_code == EXIT_OK:
                    self.exit_code = EXIT_FAILURE
                log.warning("%s stopped: %s", child.label, how)
            else:
                log.info("%s drained (%s)", child.label, how)
        elif child.retiring is not None:
            level = logging.INFO if code in (0, EXIT_RECYCLE) else logging.WARNING
            log.log(level, "%s finished %s: %s", child.label, child.retiring.split(":")[0], how)
        elif self.current.get(child.index) is child:
            del self.current[child.index]
            if code == EXIT_RECYCLE:  # recycled without a word (its report was lost): replace it now
                self._start_slot(child.index)
            elif not self.ever_ready and code in (EXIT_CONFIG, EXIT_REDIS):
                log.error("%s could not start (%s); stopping", child.label, how)
                self.exit_code = code
                self._stop_all(signal.SIGTERM)
            else:
                self._schedule_restart(child.index, child.label, f"exited unexpectedly ({how})",
                                       time.monotonic() - child.started_mono)
        self.write_state()
        self._done_if_all_gone()

    def _schedule_restart(self, index: int, label: str, what: str, uptime: float) -> None:
        """Start slot ``index`` again after the backoff its failures in a row call for
        (``uptime``: how long the failed child ran; :data:`STABLE_AFTER` resets the count)."""
        if uptime >= STABLE_AFTER:
            self.failures[index] = 0
        failures = self.failures[index] = self.failures.get(index, 0) + 1
        delay = restart_delay(failures)
        if delay >= BACKOFF_CAP:
            log.error("%s %s, %d times in a row: a crash loop; restarting in %.1f s", label, what, failures, delay)
        else:
            log.warning("%s %s; restarting in %.1f s", label, what, delay)
        self._restarts[index] = gevent.spawn_later(delay, self._restart, index)

    def _restart(self, index: int) -> None:
        self._restarts.pop(index, None)
        if self.shutting_down or index in self.current or index > self.processes:
            return
        self._start_slot(index)

    # -- signals --------------------------------------------------------------------------
    def _on_stop(self, signum: int) -> None:
        self.shutting_down += 1
        name = signal.Signals(signum).name
        for g in list(self._restarts.values()):
            g.kill(block=False)
        self._restarts.clear()
        if self._reloading is not None:
            self._reloading.kill(block=False)
        if self.shutting_down == 1:
            log.info("%s: draining %d worker process(es); in-flight jobs finish or are handed back",
                     name, len(self.children))
        else:
            log.warning("%s again: the worker processes hand their jobs back now", name)
        self._stop_all(signal.SIGTERM)
        self.write_state()
        self._done_if_all_gone()

    def _done_if_all_gone(self) -> None:
        """Stopping, and no child left nor being started: :meth:`run` may return."""
        if self.shutting_down and not self.children and not self._spawning:
            self._done.set()

    def _stop_all(self, signum: int) -> None:
        if not self.shutting_down:
            self.shutting_down = 1
        for child in list(self.children):
            child.retiring = child.retiring or "stopping"
            child.send(signum)

    def _on_hup(self, signum: int) -> None:
        if self.shutting_down:
            return
        if self._reloading is not None and not self._reloading.dead:
            log.warning("SIGHUP: a reload is under way; ignored")
            return
        self._reloading = gevent.spawn(self.reload)

    def reload(self) -> bool:
        """SIGHUP: read the file again; if it validates, replace the children one by one
        (each old one drains once its replacement is ready). True when every slot runs
        a child of the new file."""
        cfg = self.cfg
        if self.reload_config is not None:
            try:
                cfg = self.reload_config()
            except ConfigError as exc:
                log.error("SIGHUP: the configuration is not valid; the running processes stay: %s", exc)
                return False
        processes = self.processes_override or cfg.processes
        log.info("SIGHUP: %s is valid; replacing the worker processes one by one (%d)", cfg.filename, processes)
        old_count, self.processes = self.processes, processes
        for index in range(1, processes + 1):
            new = self._spawn(index)
            if new is None:
                log.error("SIGHUP: a new process %d could not be started; the running processes stay", index)
                self.processes = max(self.processes, old_count)
                return False
            gevent.wait([new.ready, new.exited], timeout=READY_TIMEOUT, count=1)
            if new.exited.is_set() or not new.ready.is_set():
                log.error("SIGHUP: the new %s did not start (%s); the running processes stay",
                          new.label, describe_exit(new.proc.returncode))
                new.retiring = "abandoned"
                new.send(signal.SIGTERM)
                self.processes = max(self.processes, old_count)
                return False
            old = self.current.get(index)  # looked up now: it may have been recycled meanwhile
            self.current[index] = new
            if old is not None and old.proc.returncode is None and old.retiring is None:
                old.retiring = "replaced"
                self._watch_retiring(old)
                old.send(signal.SIGTERM)
        for index in range(processes + 1, old_count + 1):
            old = self.current.pop(index, None)
            if old is not None and old.retiring is None:
                old.retiring = "no longer needed"
                self._watch_retiring(old)
                old.send(signal.SIGTERM)
        self.cfg = cfg
        log.info("SIGHUP: every worker process runs the new configuration")
        return True

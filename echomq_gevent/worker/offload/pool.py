"""``offload: process``: processors run in a pool of child processes.

:class:`ProcessRuntime` is the processor runtime of a queue with ``offload: process``
(made by :func:`~echomq_gevent.worker.runtime.make_runtime`). It starts
``offload_processes`` children (default: the queue's ``concurrency``), each
``python -m echomq_gevent.worker.offload.child`` started with :mod:`gevent.subprocess`, and
speaks :mod:`.wire` with them over their stdin/stdout pipes, which gevent reads
and writes cooperatively: a job greenlet waiting for its child never blocks the hub.

* Processors cross by name: the child imports ``module:qualified.name`` of the function
  the worker chose (the ``processor=`` given, or what the plugins' registry or
  ``echomq_get_processor`` return). :func:`processor_spec` refuses closures, lambdas,
  methods and objects of ``__main__``, which a fresh interpreter cannot find.
* :meth:`ProcessRuntime.start` (the worker's set-up) starts every child and has it import
  the processors known at start; one that cannot be imported fails the start.
* An exception in the child comes back as :class:`OffloadedError` (the child's type name,
  message and traceback text, which is what the job stores); ``UnrecoverableError``
  stays an ``UnrecoverableError``.
* ``job_timeout``, ``cancel_job``, a lost lock or a hand-back interrupt the job greenlet
  (a ``gevent.Timeout`` or an exception thrown into it); the child running the job is
  then killed (SIGKILL) and replaced. A child that dies by itself fails the attempt with
  :class:`ProcessorDied`, naming its exit status or signal.
"""
from __future__ import annotations

import importlib
import inspect
import logging
import os
import signal
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

import gevent
import gevent.queue
from gevent import subprocess as gsubprocess

from ...errors import ConfigError, EchoMQError, JobTimeoutError, UnrecoverableError
from .child import SETUP_ENV
from .wire import WireError, encode, read_frame

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["ProcessRuntime", "OffloadedError", "ProcessorDied", "processor_spec", "CHILD_MODULE"]

#: What each child runs (``python -m CHILD_MODULE``).
CHILD_MODULE = "echomq_gevent.worker.offload.child"
#: Seconds a child may take to start and import the processors.
START_TIMEOUT = 60.0


def _django_configured() -> bool:
    """Whether this process runs with Django set up (looked at, never imported here)."""
    conf = sys.modules.get("django.conf")
    if conf is None:
        return False
    try:
        return bool(conf.settings.configured)
    except Exception:  # pragma: no cover - a settings object that cannot say
        return False
#: Exceptions of the child kept as their own type in the worker (the failure policy reads them).
_KEPT_TYPES = {"echomq_gevent.errors.UnrecoverableError": UnrecoverableError}


class OffloadedError(EchoMQError):
    """A processor run under ``offload: process`` raised. ``str()`` is its message (the
    job's failedReason); ``type_name`` is its type (``module.Name``) and
    ``remote_traceback`` the child's traceback text (the job's stacktrace entry)."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = super().__str__()
        return text or self.type_name.rsplit(".", 1)[-1]


class ProcessorDied(EchoMQError):
    """The child running a job's processor died (a crash, a signal, ``os._exit``): the
    attempt failed and retries apply."""


def describe_exit(returncode: Optional[int]) -> str:
    """``died of SIGABRT`` / ``exited with status 3`` for a Popen return code."""
    if returncode is None:
        return "closed its pipe and is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"died of {name}"
    return f"exited with status {returncode}"


def processor_spec(fn: Callable[..., Any]) -> str:
    """The ``module:qualified.name`` under which a fresh interpreter finds ``fn``.

    Raises :class:`~echomq_gevent.errors.ConfigError` saying why it cannot: a closure or a
    lambda (defined inside a function), a method or a callable object, an object of
    ``__main__``, or a name that leads to another object (a decorator that did not keep
    the name). Called on the hub (the worker's set-up, and per job for processors the
    plugins return per job name); cheap after the first call per function.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    what = f"processor {fn!r}"
    advice = ("offload: process imports the processor by name in each child: define it at the top level of "
              "an importable module")
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise ConfigError(f"{what} has no module and name to import it by; {advice}")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise ConfigError(f"{what} ({module}:{qualname}) is a closure or a lambda, which a child process cannot "
                          f"import; {advice}")
    if module == "__main__":
        raise ConfigError(f"{what} is defined in __main__, which a child process does not run; {advice}")
    if inspect.ismethod(fn):
        raise ConfigError(f"{what} is a bound method; {advice}")
    spec = f"{module}:{qualname}"
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise ConfigError(f"{what}: {spec} cannot be imported ({type(exc).__name__}: {exc}); {advice}") from None
    if obj is not fn:
        raise ConfigError(f"{what}: {spec} names another object ({obj!r}); {advice} (a decorator must keep "
                          f"the function's name, e.g. with functools.wraps)")
    return spec


class _Child:
    """One child process and its pipes. Used by one job greenlet at a time."""

    def __init__(self, popen: Any) -> None:
        self.popen = popen
        self.pid: int = popen.pid
        #: False once it must not be used again (killed, died, or broke the protocol)
        self.usable = True

    def send(self, message: Dict[str, Any]) -> None:
        self.send_frame(encode(message))

    def send_frame(self, frame: bytes) -> None:
        stdin = self.popen.stdin
        stdin.write(frame)
        stdin.flush()

    def receive(self) -> Optional[Dict[str, Any]]:
        """The next message, or None when the child closed its end (it died)."""
        return read_frame(self.popen.stdout.read)

    def kill(self) -> None:
        self.usable = False
        try:
            self.popen.kill()
        except OSError:
            pass

    def exit_status(self, wait_s: float = 5.0) -> Optional[int]:
        """The child's return code, waiting up to ``wait_s`` for it to end."""
        try:
            return self.popen.wait(timeout=wait_s)
        except gsubprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        for pipe in (self.popen.stdin, self.popen.stdout):
            try:
                pipe.close()
            except Exception:
                pass


class ProcessRuntime:
    """Runs processors in ``size`` child processes (see the module notes).

    Made on the worker's set-up (its hub's main greenlet), :meth:`start`-ed there;
    :meth:`call` runs on the job greenlets; :meth:`close` at the worker's teardown. A job
    greenlet takes an idle child from a queue (waiting cooperatively when all are busy),
    and gives it back after the job, or kills it and starts a replacement.
    """

    name = "process"

    def __init__(self, size: int, specs: Sequence[str] = (), label: str = "worker") -> None:
        self.size = max(1, size)
        #: processor specs every child imports when it starts
        self.specs: List[str] = list(dict.fromkeys(specs))
        self.label = label
        self._idle: "gevent.queue.Queue[_Child]" = gevent.queue.Queue()
        #: every child started and not yet reaped, by pid
        self.children: Dict[int, _Child] = {}
        self._spec_cache: Dict[Any, str] = {}
        self._replacing: List[gevent.Greenlet] = []
        self._closed = False

    # -- children -----------------------------------------------------------------------
    def _environment(self) -> Dict[str, str]:
        """The child's environment: ours, with ``sys.path`` (plugin_paths, the working
        directory, the test's own paths) as PYTHONPATH so it imports what we import."""
        env = dict(os.environ)
        paths = [p or os.getcwd() for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        if _django_configured() and env.get("DJANGO_SETTINGS_MODULE"):
            # the processors' modules may import models at the top: the child sets Django
            # up from the same settings module before it imports them (child.py)
            env[SETUP_ENV] = "django"
        else:
            env.pop(SETUP_ENV, None)
        return env

    def _spawn(self) -> _Child:
        """Start one child and have it import :attr:`specs`; raises ConfigError naming a
        processor it cannot import, EchoMQError when it does not start."""
        popen = gsubprocess.Popen([sys.executable, "-m", CHILD_MODULE], stdin=gsubprocess.PIPE,
                                  stdout=gsubprocess.PIPE, env=self._environment(), close_fds=True)
        child = _Child(popen)
        self.children[child.pid] = child
        try:
            with gevent.Timeout(START_TIMEOUT, EchoMQError(
                    f"{self.label}: an offload process (pid {child.pid}) did not start within {START_TIMEOUT:.0f} s")):
                child.send({"op": "load", "specs": self.specs})
                answer = child.receive()
        except BaseException:
            self._discard(child)
            raise
        if answer is not None and answer.get("op") == "loaded":
            return child
        self._discard(child)
        if answer is not None and answer.get("op") == "load_error":
            raise ConfigError(f"{self.label}: offload: process: the processor {answer.get('spec')} cannot be "
                              f"imported in a child process: {answer.get('error')}; check that its module "
                              f"imports on its own (plugin_paths, PYTHONPATH)\n{answer.get('traceback') or ''}")
        raise EchoMQError(f"{self.label}: an offload process (pid {child.pid}) "
                          f"{describe_exit(child.exit_status(1.0))} before it was ready")

    def _discard(self, child: _Child) -> None:
        """Kill ``child`` (if it runs) and reap it on a greenlet of its own."""
        child.kill()

        def reap() -> None:
            child.exit_status(10.0)
            child.close()
            self.children.pop(child.pid, None)
        gevent.spawn(reap)

    def start(self) -> None:
        """Start every child (in parallel) and wait until each imported the processors.
        Raises ConfigError naming a processor a child cannot import; nothing is left
        running then."""
        starts = [gevent.spawn(self._spawn) for _ in range(self.size)]
        gevent.joinall(starts)
        failed = [g for g in starts if not g.successful()]
        if failed:
            for g in starts:
                if g.successful():
                    self._discard(g.value)
            raise failed[0].exception  # type: ignore[misc]
        for g in starts:
            self._idle.put(g.value)
        log.info("%s: %d offload process(es) started (pids %s)", self.label, self.size,
                 ", ".join(str(g.value.pid) for g in starts))

    def _replace(self, old: _Child) -> None:
        """Kill ``old`` and start a replacement on a greenlet, retried with a growing
        pause while it fails (a job waits for an idle child meanwhile)."""
        self._discard(old)
        if self._closed:
            return

        def replace() -> None:
            delay = 0.5
            while not self._closed:
                try:
                    child = self._spawn()
                except Exception as exc:
                    log.error("%s: an offload process could not be started (%s); trying again in %.1f s",
                              self.label, exc, delay)
                    gevent.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
                if self._closed:
                    self._discard(child)
                else:
                    self._idle.put(child)
                return
        greenlet = gevent.spawn(replace)
        self._replacing.append(greenlet)
        greenlet.link(lambda g: self._replacing.remove(g) if g in self._replacing else None)

    # -- jobs ----------------------------------------------------------------------------
    def spec_for(self, fn: Callable[..., Any]) -> str:
        """:func:`processor_spec` of ``fn``, remembered; a refusal fails the job for good
        (:class:`~echomq_gevent.errors.UnrecoverableError`)."""
        try:
            return self._spec_cache[fn]
        except (KeyError, TypeError):
            pass
        try:
            spec = processor_spec(fn)
        except ConfigError as exc:
            raise UnrecoverableError(str(exc)) from None
        try:
            self._spec_cache[fn] = spec
        except TypeError:
            pass
        return spec

    def call(self, fn: Callable[..., Any], job: Any, timeout_s: Optional[float]) -> Any:
        """On the job greenlet: run ``fn`` for ``job`` in an idle child and return what it
        returned; raise :class:`OffloadedError` for what it raised,
        :class:`ProcessorDied` when the child died,
        :class:`~echomq_gevent.errors.JobTimeoutError` after ``timeout_s``. An
        exception thrown into this greenlet (cancel, hand-back) kills the child."""
        spec = self.spec_for(fn)
        child: Optional[_Child] = None
        timer = gevent.Timeout(timeout_s) if timeout_s is not None else None
        if timer is not None:
            timer.start()
        try:
            child = self._idle.get()
            while child.popen.poll() is not None:  # died while idle (OOM killer, a signal): not this job's fault
                log.warning("%s: offload process %d %s while idle; starting another", self.label, child.pid,
                            describe_exit(child.popen.returncode))
                dead, child = child, None
                self._replace(dead)
                child = self._idle.get()
            return self._exchange(child, spec, job)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            pid = f" (pid {child.pid})" if child is not None else ""
            raise JobTimeoutError(
                f"job {job.id} ({job.name!r}) ran longer than job_timeout ({int((timeout_s or 0) * 1000)} ms); "
                f"its process{pid} was killed") from None
        finally:
            if timer is not None:
                timer.close()
            if child is not None:
                if child.usable and not self._closed:
                    self._idle.put(child)
                else:
                    self._replace(child)

    def _exchange(self, child: _Child, spec: str, job: Any) -> Any:
        """Send the job to ``child`` and serve it until its result. Marks the child unusable
        unless it ended cleanly (so :meth:`call` replaces it)."""
        try:
            frame = encode({"op": "run", "spec": spec, "job": _job_fields(job)})
        except (TypeError, ValueError, OverflowError) as exc:  # it never will cross: no retry
            raise UnrecoverableError(f"job {job.id} ({job.name!r}): its fields cannot be sent to an offload "
                                     f"process ({type(exc).__name__}: {exc})") from None
        done = False
        garbled: Optional[WireError] = None
        try:
            child.send_frame(frame)
            while True:
                message = child.receive()
                if message is None:
                    break
                op = message.get("op")
                if op == "call":
                    child.send(self._perform(job, message))
                    continue
                if op == "result":
                    done = True
                    return message.get("value")
                if op == "error":
                    done = True
                    raise _rebuild(message)
                raise WireError(f"unexpected message {op!r}")
        except OSError as exc:  # a broken pipe: the child is dying; say how below
            log.debug("%s: offload process %d: %s", self.label, child.pid, exc)
        except WireError as exc:  # alive but talking nonsense: killed below
            garbled = exc
        finally:
            if not done:
                child.usable = False
                child.kill()
        if garbled is not None:
            raise ProcessorDied(f"job {job.id} ({job.name!r}): the processor's process (pid {child.pid}) sent a "
                                f"malformed message ({garbled}) and was killed")
        how = describe_exit(child.exit_status())
        raise ProcessorDied(f"job {job.id} ({job.name!r}): the processor's process (pid {child.pid}) {how}")

    @staticmethod
    def _perform(job: Any, message: Dict[str, Any]) -> Dict[str, Any]:
        """A ``call`` of the child, performed on the worker's job; the ``reply`` to send."""
        method = message.get("method")
        args = message.get("args") or []
        if method not in ("update_progress", "log", "update_data") or len(args) != 1:
            return {"op": "reply", "error": f"unknown call {method!r} with {len(args)} argument(s)"}
        try:
            value = getattr(job, method)(args[0])
        except Exception as exc:
            return {"op": "reply", "error": f"{type(exc).__name__}: {exc}"}
        return {"op": "reply", "value": value if isinstance(value, (int, type(None))) else None}

    def close(self) -> None:
        """Stop every child: an idle one ends when its pipe closes, one still busy (a
        handed-back job) is killed. Returns after at most a few seconds."""
        self._closed = True
        for greenlet in list(self._replacing):
            greenlet.kill(block=False)
        children = list(self.children.values())
        for child in children:
            child.close()
        waiters = [gevent.spawn(child.exit_status, 2.0) for child in children]
        gevent.joinall(waiters, timeout=3.0)
        for child in children:
            if child.popen.poll() is None:
                child.kill()
                child.exit_status(1.0)
            self.children.pop(child.pid, None)


def _job_fields(job: Any) -> Dict[str, Any]:
    from .child import JOB_FIELDS

    return {name: getattr(job, name, None) for name in JOB_FIELDS}


def _rebuild(message: Dict[str, Any]) -> BaseException:
    """The exception to fail the attempt with, from the child's ``error`` message."""
    type_name = str(message.get("type") or "Exception")
    text = str(message.get("message") or "")
    trace = str(message.get("traceback") or "")
    kept = _KEPT_TYPES.get(type_name)
    if kept is not None:
        err: BaseException = kept(text)
        err.remote_traceback = trace  # type: ignore[attr-defined]
        return err
    return OffloadedError(type_name, text, trace)

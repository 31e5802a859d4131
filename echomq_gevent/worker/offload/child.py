"""The child process of ``offload: process``: ``python -m echomq_gevent.worker.offload.child``.

Started by :class:`~echomq_gevent.worker.offload.pool.ProcessRuntime` with pipes on its stdin
and stdout; it moves them to private descriptors at once, so what a processor prints goes
to stderr (the worker's log stream) and never into the protocol. Plain blocking Python,
no gevent hub, no monkey-patching: the processor has the process to itself.

It imports processors by their ``module:qualified.name`` spec (``load``), then runs one
job at a time (``run``): the processor gets an :class:`OffloadedJob`, whose
``update_progress``, ``log`` and ``update_data`` are sent to the worker, which performs
them on its own job (one round trip each) and answers. The return value goes back as
``result``, an exception as ``error`` (type, message, traceback text). End of its stdin
(the worker closed the pipe or died) ends the process. Messages: :mod:`.wire`.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional

from .wire import encode, read_frame

__all__ = ["OffloadedJob", "OffloadCallError", "resolve_spec", "main", "SETUP_ENV"]

#: Set by the worker (``pool.py``) to ``django`` when it runs with Django set up: the child
#: sets Django up before it imports the processors' modules.
SETUP_ENV = "ECHOMQ_OFFLOAD_SETUP"


class OffloadCallError(Exception):
    """The worker could not perform a call made on the job (``update_progress``, ``log``,
    ``update_data``); the message is the worker's error."""


def resolve_spec(spec: str) -> Callable[..., Any]:
    """The object ``module:qualified.name`` names. Raises ImportError or AttributeError."""
    module_name, _, qualname = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _Channel:
    """The child's end of the pipes: blocking reads and writes on two descriptors."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out

    def receive(self) -> Optional[Dict[str, Any]]:
        return read_frame(lambda n: os.read(self.fd_in, n))

    def send(self, message: Dict[str, Any]) -> None:
        view = memoryview(encode(message))
        while view:
            written = os.write(self.fd_out, view)
            view = view[written:]


#: What a processor may read on the job it receives (as :class:`~echomq_gevent.Job` names them).
JOB_FIELDS = ("id", "name", "data", "opts", "attempts_made", "attempts_started", "timestamp", "progress",
              "queue_name", "prefix", "processed_on", "delay", "priority", "parent_key", "processed_by")


class OffloadedJob:
    """The job as a processor in the child sees it: the fields of :data:`JOB_FIELDS`, and
    ``update_progress``, ``log`` and ``update_data``, each sent to the worker and
    performed there on the real job (it blocks until the worker answered; an error there
    raises :class:`OffloadCallError`). Anything else a :class:`~echomq_gevent.Job` offers
    (moving itself, the token, the Redis scripts) is not available here."""

    cancelled = False

    def __init__(self, channel: _Channel, fields: Dict[str, Any]) -> None:
        self._channel = channel
        for name in JOB_FIELDS:
            setattr(self, name, fields.get(name))

    def __repr__(self) -> str:
        return f"<OffloadedJob {self.id} {self.name!r} of queue {self.queue_name!r}>"

    def _call(self, method: str, *args: Any) -> Any:
        try:
            self._channel.send({"op": "call", "method": method, "args": list(args)})
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"job.{method}: its argument cannot be sent to the worker ({exc}); "
                            f"use JSON-like values (dicts, lists, strings, numbers, booleans, None)") from None
        reply = self._channel.receive()
        if reply is None:  # the worker is gone: nothing to report to
            os._exit(0)
        if reply.get("error") is not None:
            raise OffloadCallError(f"job.{method}: {reply['error']}")
        return reply.get("value")

    def update_progress(self, value: Any) -> None:
        self._call("update_progress", value)
        self.progress = value

    def log(self, line: str) -> int:
        return int(self._call("log", line))

    def update_data(self, data: Any) -> None:
        self._call("update_data", data)
        self.data = data

    def check_cancelled(self) -> None:
        """Never raises here: a cancelled job's process is terminated instead."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"job.{name} is not available to a processor under offload: process; it has "
                             f"{', '.join(JOB_FIELDS)}, update_progress, log and update_data")


def _error_message(exc: BaseException) -> Dict[str, Any]:
    from ..tracebacks import format_failure

    try:
        message = str(exc)
    except Exception:
        message = ""
    try:
        text = format_failure(exc)
    except Exception:
        text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    cls = type(exc)
    return {"op": "error", "type": f"{cls.__module__}.{cls.__qualname__}", "message": message,
            "traceback": text}


def _run(channel: _Channel, processors: Dict[str, Callable[..., Any]], message: Dict[str, Any]) -> None:
    spec = message.get("spec")
    try:
        fn = processors.get(spec) if isinstance(spec, str) else None
        if fn is None:
            fn = processors[spec] = resolve_spec(str(spec))
        result = fn(OffloadedJob(channel, message.get("job") or {}))
    except BaseException as exc:  # everything the processor raises fails the attempt, SystemExit too
        channel.send(_error_message(exc))
        return
    try:
        frame = {"op": "result", "value": result}
        encode(frame)
    except (TypeError, ValueError, OverflowError) as exc:
        channel.send({"op": "error", "type": "builtins.TypeError",
                      "message": f"the processor's return value cannot be sent back to the worker ({exc}); "
                                 f"return dicts, lists, strings, numbers, booleans or None",
                      "traceback": ""})
        return
    channel.send(frame)


def _setup_framework() -> None:
    """Before the processors' modules are imported: set Django up when the worker runs
    with it (``SETUP_ENV``, set by the pool), so a module that imports models at the top
    imports here as it does in the worker."""
    if os.environ.get(SETUP_ENV) == "django":
        import django

        django.setup()


def _load(channel: _Channel, processors: Dict[str, Callable[..., Any]], specs: List[str]) -> None:
    try:
        _setup_framework()
    except BaseException as exc:
        channel.send({"op": "load_error", "spec": specs[0] if specs else "",
                      "error": f"setting Django up from DJANGO_SETTINGS_MODULE="
                               f"{os.environ.get('DJANGO_SETTINGS_MODULE', '')!r} failed: {type(exc).__name__}: {exc}",
                      "traceback": _error_message(exc)["traceback"]})
        return
    for spec in specs:
        try:
            fn = resolve_spec(spec)
            if not callable(fn):
                raise TypeError(f"{fn!r} is not callable")
        except BaseException as exc:
            channel.send({"op": "load_error", "spec": spec, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": _error_message(exc)["traceback"]})
            return
        processors[spec] = fn
    channel.send({"op": "loaded", "pid": os.getpid()})


def _die_with_parent() -> None:
    """Linux: be sent SIGKILL when the worker dies, even by SIGKILL (prctl
    PR_SET_PDEATHSIG); elsewhere an idle child still ends when its pipe closes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover
        pass


def main() -> int:
    """Serve the worker until its pipe closes. Returns the exit status."""
    fd_in, fd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # print() in a processor goes to stderr, not into the protocol
    _die_with_parent()
    channel = _Channel(fd_in, fd_out)
    processors: Dict[str, Callable[..., Any]] = {}
    while True:
        message = channel.receive()
        if message is None:
            return 0
        op = message.get("op")
        if op == "load":
            _load(channel, processors, list(message.get("specs") or []))
        elif op == "run":
            _run(channel, processors, message)
        else:
            sys.stderr.write(f"echomq offload child: unknown message {op!r}; ignored\n")


if __name__ == "__main__":
    sys.exit(main())

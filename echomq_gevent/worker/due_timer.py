"""A wake-up at a delayed job's due time, to a fraction of a millisecond.

The fetch loop of an idle worker waits for the earliest delayed job (or scheduler run) on
its own clock. A gevent timer is late there: libev's ``epoll`` backend waits in whole
milliseconds, rounded up, and a timer's wait is counted from the loop's cached time, so a
timer fires 0.4 to 1.4 ms after its time (0.8 ms at the median on a 2-vCPU VM). Every
delayed run a worker takes alone, and the first of every burst, starts that much late.

On Linux, :class:`DueTimer` arms a ``timerfd`` on the wall clock (``CLOCK_REALTIME`` with
an absolute time: a due time is a time of the wall clock, which Redis and the producers
share) and has the hub's loop watch its descriptor. ``epoll`` returns the moment the
descriptor becomes readable, so the callback runs within tens of microseconds of the due
time, never before it. The fetch loop's wait ends on that callback (it sets the loop's
wake-up event); its own timer stays as the fallback.

Where there is no ``timerfd`` (not Linux, a C library without it) :func:`make_due_timer`
returns None, and the loop waits on its timer as before. Created and used on the hub of
the fetch loop only; the callback runs in the hub and only sets an event.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Any, Callable, Optional

import gevent

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["DueTimer", "make_due_timer"]

_CLOCK_REALTIME = 0
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
_READ = 1  # libev's EV_READ, the same in gevent's libuv loop


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc: Any = None


def _timerfd_calls() -> Optional[Any]:
    """The C library, when it has ``timerfd_create`` and ``timerfd_settime``; else None."""
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
                libc.timerfd_create.restype = ctypes.c_int
                libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                                 ctypes.c_void_p]
                libc.timerfd_settime.restype = ctypes.c_int
                _libc = libc
            except (OSError, AttributeError):
                pass
    return _libc or None


class DueTimer:
    """Calls ``on_due`` in the hub once the wall clock reaches the time given to
    :meth:`arm` (epoch ms). One time at a time: arming again replaces it. Made by
    :func:`make_due_timer`; :meth:`close` releases the descriptor."""

    def __init__(self, libc: Any, fd: int, on_due: Callable[[], None]) -> None:
        self._libc = libc
        self._fd = fd
        self._on_due = on_due
        #: the due time armed last (epoch ms), 0 when none
        self.armed = 0
        self._watcher = gevent.get_hub().loop.io(fd, _READ)
        self._watcher.ref = False  # a pending due time alone does not keep the hub running
        self._watcher.start(self._fired)

    def arm(self, due_ms: int) -> bool:
        """Wake at ``due_ms`` (epoch ms); a time already past wakes at once. False when the
        timer could not be set (the caller's own timer still wakes the loop)."""
        due_ms = int(due_ms)
        if self._fd < 0:
            return False
        if due_ms == self.armed:
            return True
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(due_ms // 1000, (due_ms % 1000) * 1000000))
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            log.debug("timerfd_settime failed (errno %d); the fetch loop wakes on its own timer",
                      ctypes.get_errno())
            return False
        self.armed = due_ms
        return True

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count; reading it re-arms the readiness
        except (BlockingIOError, InterruptedError):
            return  # re-armed for a later time since it fired: not due yet
        except OSError:
            return
        self.armed = 0
        self._on_due()

    def close(self) -> None:
        """Stop watching and close the descriptor (idempotent)."""
        if self._fd < 0:
            return
        self._watcher.stop()
        try:
            self._watcher.close()
        except AttributeError:  # pragma: no cover - older loops have no close()
            pass
        os.close(self._fd)
        self._fd = -1
        self.armed = 0


def make_due_timer(on_due: Callable[[], None]) -> Optional[DueTimer]:
    """A :class:`DueTimer` on the current hub, or None where the platform has no
    ``timerfd`` (or cannot make one now: the loop then waits on its own timer)."""
    libc = _timerfd_calls()
    if libc is None:
        return None
    fd = libc.timerfd_create(_CLOCK_REALTIME, _TFD_NONBLOCK | _TFD_CLOEXEC)
    if fd < 0:
        log.debug("timerfd_create failed (errno %d); the fetch loop wakes on its own timer", ctypes.get_errno())
        return None
    try:
        return DueTimer(libc, fd, on_due)
    except Exception:
        os.close(fd)
        raise

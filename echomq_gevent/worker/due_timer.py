"""A wake-up at a delayed job's due time, to a fraction of a millisecond.

The fetch loop of an idle worker waits for the earliest delayed job (or scheduler run) on
its own clock. A gevent timer is late there: libev's ``epoll`` backend waits in whole
milliseconds, rounded up, and a timer's wait is counted from the loop's cached time, so a
timer fires 0.4 to 1.4 ms after its time (0.8 ms at the median on a 2-vCPU VM). Every
delayed run a worker takes alone, and the first of every burst, started that much late.

On Linux a ``timerfd`` on the wall clock (``CLOCK_REALTIME`` with an absolute time: a due
time is a time of the wall clock, which Redis and the producers share) is watched by the
hub's loop. ``epoll`` returns the moment the descriptor becomes readable, so the call comes
within tens of microseconds of the due time, never before it. One descriptor serves every
fetch loop of a hub (a process with hundreds of queues holds one, not hundreds): it is
armed for the earliest time asked for, and each :class:`DueTimer` is a loop's handle on it.
The fetch loop's wait ends on the call (it sets the loop's wake-up event); its own timer
stays as the fallback.

Where there is no ``timerfd`` (not Linux, a C library without it, no descriptor left)
:func:`make_due_timer` returns None and the loop waits on its timer as before. Used on the
hub of the fetch loop only; the calls run in the hub and only set an event. A forked child
makes a descriptor of its own (a shared one would hand its expiries to either process).
"""
from __future__ import annotations

import ctypes
import heapq
import itertools
import logging
import os
import sys
import time
import weakref
from typing import Any, Callable, List, Optional, Tuple

import gevent

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["DueTimer", "make_due_timer"]

_CLOCK_REALTIME = 0
_TFD_NONBLOCK = os.O_NONBLOCK  # the kernel defines TFD_NONBLOCK and TFD_CLOEXEC as these
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
_READ = 1  # libev's EV_READ, the same in gevent's libuv loop
_HUB_ATTR = "_echomq_due_timers"


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


class _HubTimer:
    """The one ``timerfd`` of a hub, armed for the earliest due time its handles asked for."""

    def __init__(self, libc: Any, fd: int) -> None:
        self._libc = libc
        self.fd = fd
        self.pid = os.getpid()
        self._heap: List[Tuple[int, int, "DueTimer"]] = []  # (due ms, order, handle)
        self._order = itertools.count()
        self._set_for = 0  # the time the descriptor is armed for, 0 when disarmed
        self._watcher = gevent.get_hub().loop.io(fd, _READ)
        self._watcher.ref = False  # a pending due time alone does not keep the hub running
        self._watcher.start(self._fired)
        _made.add(self)

    def abandon(self) -> None:
        """Stop watching the descriptor and close it: in a forked child, the copy inherited
        from the parent (whose timer goes on); or one the hub could not keep."""
        self.pid = -1
        self._heap = []
        try:
            self._watcher.stop()
        except Exception:  # pragma: no cover - a loop gone with the fork
            pass
        try:
            os.close(self.fd)
        except OSError:  # pragma: no cover
            pass

    def _settime(self, due_ms: int) -> bool:
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(due_ms // 1000, (due_ms % 1000) * 1000000))
        if self._libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            log.debug("timerfd_settime failed (errno %d); the fetch loops wake on their own timers",
                      ctypes.get_errno())
            return False
        self._set_for = due_ms
        return True

    def add(self, handle: "DueTimer", due_ms: int) -> bool:
        heapq.heappush(self._heap, (due_ms, next(self._order), handle))
        if self._set_for and self._set_for <= due_ms:
            return True  # armed for an earlier time already; re-armed for this one then
        return self._settime(due_ms)

    def _fired(self) -> None:
        try:
            os.read(self.fd, 8)  # the expiry count; reading it clears the readiness
        except OSError:  # re-armed for a later time since it became readable: not due yet
            return
        self._set_for = 0
        now = time.time() * 1000.0
        heap = self._heap
        due_now: List[DueTimer] = []
        while heap and heap[0][0] <= now:
            due, _, handle = heapq.heappop(heap)
            if handle.armed == due:  # not re-armed for another time or closed since
                handle.armed = 0
                due_now.append(handle)
        while heap and heap[0][2].armed != heap[0][0]:  # drop what was re-armed or closed
            heapq.heappop(heap)
        if heap:
            self._settime(heap[0][0])
        for handle in due_now:
            handle.on_due()


class DueTimer:
    """One fetch loop's wake-up: calls ``on_due`` in the hub once the wall clock reaches
    the time given to :meth:`arm` (epoch ms). One time at a time: arming again replaces it.
    Made by :func:`make_due_timer`; :meth:`close` cancels it."""

    def __init__(self, hub_timer: _HubTimer, on_due: Callable[[], None]) -> None:
        self._hub_timer: Optional[_HubTimer] = hub_timer
        self.on_due = on_due
        #: the due time armed last (epoch ms), 0 when none is pending
        self.armed = 0

    @property
    def closed(self) -> bool:
        return self._hub_timer is None

    def arm(self, due_ms: int) -> bool:
        """Wake at ``due_ms`` (epoch ms); a time already past wakes at once. False when
        closed or the timer could not be set (the caller's own timer still wakes the loop)."""
        hub_timer = self._hub_timer
        due_ms = int(due_ms)
        if hub_timer is None or hub_timer.pid != os.getpid():
            return False
        if due_ms == self.armed:
            return True
        self.armed = due_ms
        if not hub_timer.add(self, due_ms):
            self.armed = 0
            return False
        return True

    def close(self) -> None:
        """Cancel the pending time; no call comes after this (idempotent)."""
        self._hub_timer = None
        self.armed = 0


#: every hub timer of this process, for a forked child to abandon
_made: "weakref.WeakSet[_HubTimer]" = weakref.WeakSet()


def _abandon_in_child() -> None:
    for hub_timer in list(_made):
        hub_timer.abandon()
    _made.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_in_child)


def make_due_timer(on_due: Callable[[], None]) -> Optional[DueTimer]:
    """A :class:`DueTimer` on the current hub, or None where the platform has no
    ``timerfd`` (or no descriptor can be made now: the loop then waits on its own timer)."""
    libc = _timerfd_calls()
    if libc is None:
        return None
    hub = gevent.get_hub()
    hub_timer: Optional[_HubTimer] = getattr(hub, _HUB_ATTR, None)
    if hub_timer is None or hub_timer.pid != os.getpid():
        fd = libc.timerfd_create(_CLOCK_REALTIME, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            log.debug("timerfd_create failed (errno %d); the fetch loop wakes on its own timer",
                      ctypes.get_errno())
            return None
        hub_timer = None
        try:
            hub_timer = _HubTimer(libc, fd)
            setattr(hub, _HUB_ATTR, hub_timer)
        except Exception as exc:  # a loop that cannot watch it: the loop's own timer will do
            log.debug("the hub cannot watch a timerfd (%s); the fetch loop wakes on its own timer", exc)
            if hub_timer is not None:
                hub_timer.abandon()  # stops its watcher and closes the descriptor
            else:
                os.close(fd)
            return None
    return DueTimer(hub_timer, on_due)

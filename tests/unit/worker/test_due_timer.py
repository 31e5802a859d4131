"""``worker/due_timer.py``: a wake-up at a due time of the wall clock, on the hub's one
``timerfd``. It never calls before its time (no upper bound is asserted: machines are
noisy), a new time replaces the old, the handles of one hub share one descriptor and each
is called at its own time, a closed handle is never called, a forked child drops the
descriptor it inherited, and without a timerfd there is none (the fetch loop then waits on
its own timer)."""
from __future__ import annotations

import sys
import time

import gevent
import gevent.event
import pytest

from echomq_gevent.worker import due_timer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _recording():
    calls = []
    fired = gevent.event.Event()

    def on_due():
        calls.append(time.time() * 1000.0)
        fired.set()

    return calls, fired, on_due


@pytest.fixture
def recorded():
    """A due timer on this hub, the times it called at and an event set at its first call."""
    calls, fired, on_due = _recording()
    timer = due_timer.make_due_timer(on_due)
    assert timer is not None
    yield timer, calls, fired
    timer.close()


def test_it_calls_once_the_wall_clock_reaches_the_time_never_before(recorded):
    timer, calls, fired = recorded
    due = int(time.time() * 1000) + 30
    assert timer.arm(due) and timer.armed == due
    assert fired.wait(5)
    assert len(calls) == 1 and calls[0] >= due
    assert timer.armed == 0


def test_arming_again_replaces_the_time(recorded):
    timer, calls, fired = recorded
    now = int(time.time() * 1000)
    timer.arm(now + 40)
    timer.arm(now + 150)  # the first time is gone
    assert fired.wait(5)
    assert calls[0] >= now + 150
    gevent.sleep(0.1)
    assert len(calls) == 1


def test_a_time_already_past_calls_at_once(recorded):
    timer, calls, fired = recorded
    assert timer.arm(int(time.time() * 1000) - 1000)
    assert fired.wait(5) and len(calls) == 1


def test_a_closed_timer_never_calls_and_closes_once():
    calls, _, on_due = _recording()
    timer = due_timer.make_due_timer(on_due)
    timer.arm(int(time.time() * 1000) + 30)
    timer.close()
    gevent.sleep(0.1)
    assert calls == []
    timer.close()  # again: nothing to do
    assert timer.arm(int(time.time() * 1000) + 10) is False


def test_without_a_timerfd_there_is_no_due_timer(monkeypatch):
    monkeypatch.setattr(due_timer, "_libc", False)  # as on a platform without timerfd
    assert due_timer.make_due_timer(lambda: None) is None


def test_the_loops_of_a_hub_share_one_descriptor_and_each_is_called_at_its_time():
    first_calls, first_fired, first = _recording()
    second_calls, second_fired, second = _recording()
    late = due_timer.make_due_timer(first)
    early = due_timer.make_due_timer(second)
    try:
        assert late._hub_timer is early._hub_timer
        now = int(time.time() * 1000)
        late.arm(now + 120)
        early.arm(now + 30)  # earlier than the time the descriptor is armed for
        assert second_fired.wait(5) and not first_fired.is_set()  # the earlier time first
        assert second_calls[0] >= now + 30
        assert first_fired.wait(5) and first_calls[0] >= now + 120
        gevent.sleep(0.05)
        assert len(first_calls) == len(second_calls) == 1
    finally:
        late.close()
        early.close()


def test_a_forked_child_drops_the_descriptor_it_inherited():
    calls, fired, on_due = _recording()
    before = due_timer.make_due_timer(on_due)
    inherited = before._hub_timer
    due_timer._abandon_in_child()  # what runs in a child after fork
    assert before.arm(int(time.time() * 1000) + 10) is False  # its loop waits on its own timer
    after = due_timer.make_due_timer(on_due)
    try:
        assert after._hub_timer is not inherited
        assert after.arm(int(time.time() * 1000) + 20) and fired.wait(5) and len(calls) == 1
    finally:
        after.close()


def test_a_hub_that_cannot_watch_the_descriptor_gets_none_and_keeps_no_descriptor(monkeypatch):
    monkeypatch.delattr(gevent.get_hub(), due_timer._HUB_ATTR, raising=False)  # none made yet
    closed = []
    real_close = due_timer.os.close
    monkeypatch.setattr(due_timer.os, "close", lambda fd: closed.append(fd) or real_close(fd))

    class Unwatchable(due_timer._HubTimer):
        def __init__(self, libc, fd):
            raise OSError("no watcher")

    monkeypatch.setattr(due_timer, "_HubTimer", Unwatchable)
    assert due_timer.make_due_timer(lambda: None) is None  # the loop's own timer will do
    assert len(closed) == 1  # the descriptor made for it was closed

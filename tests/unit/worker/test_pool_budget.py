"""The pool's hand-out of slots (worker/pool/budget.py), without Redis: each order's
choice among the queues that ask, the caps, fetch-next's keep, giving grants back."""
from __future__ import annotations

import collections

import pytest

from echomq_gevent.worker.pool.budget import PoolBudget


def members(budget, *specs):
    """Join ``(name, cap)`` members; each records how often it was woken."""
    woken = collections.Counter()
    out = []
    for name, cap in specs:
        out.append(budget.join(name, cap, lambda name=name: woken.update([name])))
    return out, woken


def drive(budget, ms, turns):
    """Every member always has work, as a fetch loop with a backlog: it asks for as many
    slots as its cap leaves, starts a job per slot granted, and asks again. Each turn the
    oldest slot's job finishes: fetch-next keeps the slot when the order says so, else
    the slot ends and goes to the queue the order names."""
    served = collections.Counter()
    running = collections.deque()

    def serve(m):
        while m.held + m.granted < m.cap:
            n = m.request(m.cap - m.held)
            if not n:
                return  # it waits, asking, until a grant wakes it
            for _ in range(n):
                m.start_slot()
                running.append(m)
                served[m.name] += 1
            m.fetched()

    for m in ms:
        serve(m)
    for _ in range(turns):
        m = running.popleft()
        if m.keep():  # fetch-next: the slot goes on with this queue's next job
            running.append(m)
            served[m.name] += 1
            continue
        m.end_slot()
        for other in ms:
            serve(other)
    return served


def test_weighted_shares_follow_the_weights_and_starve_nobody():
    budget = PoolBudget(8, "weighted", {"a": 5, "b": 1, "c": 2}, queues=["a", "b", "c"])
    ms, _ = members(budget, ("a", 8), ("b", 8), ("c", 8))
    served = drive(budget, ms, 8000)
    total = sum(served.values())
    assert abs(served["a"] / total - 5 / 8) < 0.02, served
    assert abs(served["b"] / total - 1 / 8) < 0.02, served
    assert abs(served["c"] / total - 2 / 8) < 0.02, served
    assert budget.used <= 8 and budget.peak <= 8


def test_round_robin_gives_equal_turns():
    budget = PoolBudget(6, "round_robin")
    ms, _ = members(budget, ("a", 6), ("b", 6), ("c", 6))
    served = drive(budget, ms, 6000)
    assert max(served.values()) - min(served.values()) <= 0.02 * sum(served.values()), served


def test_strict_serves_the_first_queue_with_work():
    budget = PoolBudget(4, "strict")
    (a, b), woken = members(budget, ("a", 4), ("b", 4))
    assert b.request(4) == 4  # a has no work: b takes every slot
    for _ in range(4):
        b.start_slot()
    b.fetched()
    assert a.request(4) == 0  # a's marker fired: no slot is free, it waits
    assert not b.keep()  # b's finishing job gives its slot up: a comes first
    b.end_slot()
    assert a.granted == 1 and woken["a"] == 1


def test_a_queue_never_gets_more_than_its_cap():
    budget = PoolBudget(10, "weighted")
    (a, b), _ = members(budget, ("a", 3), ("b", 10))
    assert a.request(10) == 3
    assert b.request(10) == 7
    assert budget.free == 0


def test_grants_a_pickup_did_not_use_go_to_the_next_queue():
    budget = PoolBudget(2, "round_robin")
    (a, b), woken = members(budget, ("a", 2), ("b", 2))
    assert a.request(2) == 2
    assert b.request(2) == 0
    a.start_slot()  # one job was ready, not two
    a.fetched()
    assert b.granted == 1 and woken["b"] == 1
    assert budget.used == 2


def test_withdraw_and_leave_give_everything_back():
    budget = PoolBudget(3, "strict")
    (a, b), _ = members(budget, ("a", 3), ("b", 3))
    assert b.request(3) == 3
    b.withdraw()  # b went to wait on its marker instead
    assert budget.used == 0
    a.request(3)
    a.start_slot()
    a.leave()  # its queue is gone: the slot it held is free again
    assert budget.used == 0 and a not in budget.members
    a.end_slot()  # the greenlet ending later changes nothing
    assert budget.used == 0


def test_keep_without_contention_and_a_lowered_budget():
    budget = PoolBudget(2, "weighted")
    (a,), _ = members(budget, ("a", 2))
    a.request(2)
    a.start_slot()
    a.start_slot()
    a.fetched()
    assert a.keep()  # nobody else asks
    b = budget.join("b", 2, lambda: None)
    b.request(1)
    budget.set_concurrency(1)
    assert not a.keep()  # over the lowered budget: the slot is given up


@pytest.mark.parametrize("kwargs, message", [
    ({"concurrency": 0}, "concurrency must be a whole number"),
    ({"concurrency": 2, "order": "fair"}, "order must be one of strict, weighted, round_robin"),
    ({"concurrency": 2, "weights": {"a": 1.5}, "queues": ["a"]}, "weights.a must be a whole number"),
    ({"concurrency": 2, "weights": {"b": 1}, "queues": ["a"]}, "queue 'b' is not in this pool's queues"),
    ({"concurrency": 2, "order": "strict", "weights": {"a": 2}, "queues": ["a"]}, "order: weighted only"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PoolBudget(**kwargs)

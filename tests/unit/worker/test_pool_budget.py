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


def count_key_reads(budget):
    """Count the reads of a queue's standing (``_key``) the budget makes from now on."""
    reads = collections.Counter()
    key = budget._key

    def counting_key(m):
        reads["key"] += 1
        return key(m)

    budget._key = counting_key
    return reads


def drive(budget, ms, turns):
    """Every member always has work, as a fetch loop with a backlog: it asks for as many
    slots as its cap leaves, starts a job per slot granted, and asks again. Each turn the
    oldest slot's job finishes: fetch-next keeps the slot when the order says so, else
    the slot ends and goes to the queue the order names."""
    served = collections.Counter()
    running = collections.deque()  # (member, the jobs its slot ran before this one)

    def serve(m):
        while m.held + m.granted < m.cap:
            n = m.request(m.cap - m.held)
            if not n:
                return  # it waits, asking, until a grant wakes it
            for _ in range(n):
                m.start_slot()
                running.append((m, 0))
                served[m.name] += 1
            m.fetched()

    for m in ms:
        serve(m)
    for _ in range(turns):
        m, streak = running.popleft()
        if m.keep(streak):  # fetch-next: the slot goes on with this queue's next job
            running.append((m, streak + 1))
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


@pytest.mark.parametrize("turn", [2, 5])
def test_weighted_shares_hold_with_turns(turn):
    budget = PoolBudget(8, "weighted", {"a": 5, "b": 1, "c": 2}, queues=["a", "b", "c"], turn=turn)
    ms, _ = members(budget, ("a", 8), ("b", 8), ("c", 8))
    served = drive(budget, ms, 8000)
    total = sum(served.values())
    for name, share in (("a", 5 / 8), ("b", 1 / 8), ("c", 2 / 8)):
        assert abs(served[name] / total - share) < 0.03, served


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


def _scan_choose(budget, keeper):
    """The choice by looking at every asking queue (the hand-out before its heap): the
    oracle the heap must agree with."""
    strict = budget.order == "strict"
    best = best_key = None
    for m in budget._ready:
        if m is keeper or m.held + m.granted >= m.cap:
            continue
        key = m.index if strict else ((m.held + m.granted) / m.weight, m.last)
        if best is None or key < best_key:
            best, best_key = m, key
    if keeper is not None and keeper.held <= keeper.cap:
        if strict:
            if best is None or keeper.index < best_key:
                return keeper
        else:
            share = (keeper.held - 1 + keeper.granted) / keeper.weight
            if best is None or share < best_key[0] or (
                    best.held + best.granted > 0 and share < best_key[0] + 1 / keeper.weight):
                return keeper
    return best


def _standing(budget, m):
    """What decides a choice: equal standings are equally right answers."""
    if m is None:
        return None
    return m.index if budget.order == "strict" else ((m.held + m.granted) / m.weight, m.last)


@pytest.mark.parametrize("order", ["strict", "weighted", "round_robin"])
@pytest.mark.parametrize("seed", range(6))
def test_the_heap_chooses_as_a_look_at_every_queue_would(order, seed):
    """Random pick-ups, finishes, withdrawals, cap and budget changes, queues leaving: at
    every step the heap's choice, with and without a finishing job's queue, stands where
    a scan of every asking queue's would."""
    import random

    rnd = random.Random(seed)
    names = [f"q{i}" for i in range(40)]
    weights = {n: rnd.randint(1, 5) for n in names} if order == "weighted" else None
    budget = PoolBudget(25, order, weights, queues=names if weights else None)
    ms, _ = members(budget, *[(n, rnd.randint(1, 8)) for n in names])
    running = []  # members with a job in a slot, one entry a slot
    for _step in range(4000):
        live = [m for m in ms if not m.left]
        op = rnd.random()
        if op < 0.35:
            m = rnd.choice(live)
            if m.granted == 0:
                n = m.request(rnd.randint(1, m.cap))
                took = rnd.randint(0, n)  # a pick-up may bring fewer than granted
                for _ in range(took):
                    m.start_slot()
                    running.append(m)
                m.fetched()
        elif op < 0.75 and running:
            m = running.pop(rnd.randrange(len(running)))
            stays = budget.used <= budget.concurrency and (not budget._ready or _scan_choose(budget, m) is m)
            if rnd.random() < 0.5:  # else the keep decides on what the steps before left behind
                expected = _standing(budget, _scan_choose(budget, m))
                chose = budget._choose(m)
                assert _standing(budget, chose) == expected
                assert (chose is m) == (_scan_choose(budget, m) is m)
            if m.keep():
                assert stays, m
                running.append(m)
            else:
                assert not stays, m
                m.end_slot()
        elif op < 0.85:
            rnd.choice(live).withdraw()
        elif op < 0.92:
            rnd.choice(live).set_cap(rnd.randint(1, 8))
        elif op < 0.96:
            budget.set_concurrency(rnd.randint(5, 30))
        elif len(live) > 5:
            m = rnd.choice(live)
            m.leave()
            running = [r for r in running if r is not m]
        if budget._low is not None:  # the keep's shortcut: never above the least share asking
            assert all(budget._low <= (m.held + m.granted) / m.weight
                       for m in budget._ready if m.held + m.granted < m.cap), budget._low
        if rnd.random() < 0.5:
            assert _standing(budget, budget._choose(None)) == _standing(budget, _scan_choose(budget, None))
        assert len(budget._heap) <= 2 * len(budget._ready) + 64 + len(budget._ready)


def test_a_choice_among_a_thousand_asking_queues_looks_at_few():
    """1,000 tenant queues with a backlog each and 50 slots, driven as fetch loops are: a
    queue asks and waits; a grant wakes it, it picks up and asks again. A finish's
    choice and a grant read a handful of heap entries, not every queue: the hand-out's
    cost does not grow with the number of queues that have work."""
    budget = PoolBudget(50, "round_robin")
    woke = []
    ms = [budget.join(f"t{i}", 50, lambda i=i: woke.append(i)) for i in range(1000)]
    running = collections.deque()
    served = collections.Counter()

    def pick_up(m):
        for _ in range(m.granted):
            m.start_slot()
            running.append(m)
            served[m.name] += 1
        m.fetched()
        m.request(m.cap - m.held)  # a backlog: ask for more, then wait for a grant

    for m in ms:
        m.request(m.cap)
    reads = count_key_reads(budget)
    turns = 20000
    for turn in range(turns):
        if turn == 1000:  # after the first queue's start with every slot (it asked first)
            served.clear()
        while woke:
            pick_up(ms[woke.pop()])
        m = running.popleft()
        if m.keep():
            running.append(m)
            served[m.name] += 1
        else:
            m.end_slot()  # its fetch loop, woken by the freed slot, asks again
            if not m.want and not m.granted:
                m.request(m.cap - m.held)
    assert len(served) == 1000  # every tenant had its turns, alike
    assert max(served.values()) - min(served.values()) <= 1, (max(served.values()), min(served.values()))
    assert reads["key"] / turns < 20, reads  # about 10; a look at every queue: 1,000


@pytest.mark.parametrize("order", ["round_robin", "weighted"])
@pytest.mark.parametrize("queues", [100, 60])
def test_busy_queues_holding_their_share_keep_their_slots_without_a_look(order, queues):
    """Queues with a backlog sharing 100 slots: one each of 100 queues (the pools bench's
    100 queues), or one or two each of 60 (within one slot of each other, where the order
    moves none): every finishing job keeps its slot for its queue's next job, and after
    the first choice that learns the least share, a keep reads no queue's standing at all."""
    budget = PoolBudget(100, order)
    ms, _ = members(budget, *[(f"q{i}", 100) for i in range(queues)])
    while budget.used < 100:  # a slot each in turn, until none is left
        for m in ms[:100 - budget.used]:
            assert m.request(1) == 1
            m.start_slot()
            m.fetched()
    for m in ms:  # then each asks for more, and waits: none is free
        assert m.request(99) == 0
    held = sorted(m.held for m in ms)
    assert held[0] >= 1 and held[-1] - held[0] <= 1 and budget.used == 100
    reads = count_key_reads(budget)
    keeps = 10000
    for i in range(keeps):
        assert ms[i % queues].keep()
    assert sorted(m.held for m in ms) == held and budget.used == 100
    assert reads["key"] <= 5, reads  # one choice at most, then a comparison a keep


def test_a_slot_runs_its_turn_before_the_order_moves_it():
    budget = PoolBudget(1, "round_robin", turn=3)
    (a, b), woken = members(budget, ("a", 1), ("b", 1))
    assert a.request(1) == 1
    a.start_slot()
    a.fetched()
    assert b.request(1) == 0  # b waits, holding nothing
    assert a.keep(0) and a.keep(1)  # the slot's first two jobs: its turn goes on
    assert not a.keep(2)  # the third ends the turn: b, holding none, comes first
    a.end_slot()
    assert b.granted == 1 and woken["b"] == 1
    with pytest.raises(ValueError, match="turn must be a whole number of jobs, at least 1, got 0"):
        PoolBudget(2, "round_robin", turn=0)


@pytest.mark.parametrize("turn", [1, 10])
def test_turns_keep_shares_equal_and_save_a_move_a_job(turn):
    """More queues with work than slots (200 tenants, 20 slots): each turn of ``turn`` jobs
    a slot, the order moves the slot; every tenant runs its equal share all the same, and
    slots move (a pick-up each) once a turn, not once a job."""
    budget = PoolBudget(20, "round_robin", turn=turn)
    woke = []
    ms = [budget.join(f"t{i}", 20, lambda i=i: woke.append(i)) for i in range(200)]
    running = collections.deque()  # (member, jobs its slot ran before this one)
    served = collections.Counter()
    moves = 0

    def pick_up(m):
        for _ in range(m.granted):
            m.start_slot()
            running.append((m, 0))
            served[m.name] += 1
        m.fetched()
        m.request(m.cap - m.held)

    for m in ms:
        m.request(m.cap)
    turns = 40000
    for step in range(turns):
        if step == 2000:
            served.clear()
            moves = 0
        while woke:
            pick_up(ms[woke.pop()])
        m, streak = running.popleft()
        if m.keep(streak):
            running.append((m, streak + 1))
            served[m.name] += 1
        else:
            moves += 1
            m.end_slot()
            if not m.want and not m.granted:
                m.request(m.cap - m.held)
    assert len(served) == 200
    assert max(served.values()) - min(served.values()) <= 2 * turn, (min(served.values()), max(served.values()))
    assert abs(moves / (turns - 2000) - 1 / turn) < 0.02, moves

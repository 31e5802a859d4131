"""One concurrency budget shared by the workers of several queues: the pool's slots and
who gets each.

A pool is a list of queues that share ``concurrency`` slots (``pools:`` in the YAML file,
:class:`~echomq_gevent.worker.pool.Pool` in Python). Each queue keeps its own
:class:`~echomq_gevent.worker.Worker` (its processor, limiter, offload, options); its own
``concurrency`` is its cap inside the pool. What the workers share is a
:class:`PoolBudget`, and each holds a :class:`PoolMember` of it:

* **The slot math stays the seed's**: ``free = pool concurrency - slots in use``. A slot is
  in use from the moment it is granted to a queue until the greenlet that ran its jobs
  ends (a busy slot refilled by fetch-next stays in use).
* **Who gets a free slot.** A queue's fetch loop that has work to take (its marker fired,
  or its last pick-up said more jobs are ready) asks for slots (:meth:`PoolMember.request`)
  and, when none is free, waits to be woken with a grant. A queue whose loop waits on its
  marker, is rate limited, paused or at its cap does not ask, so idle queues cost nothing.
  Each free slot goes to one of the asking queues by the pool's order:

  - ``strict``: the first queue of the list that asks;
  - ``weighted``: the asking queue that holds the fewest slots for its weight (slots in use
    or granted, divided by its weight); between equals, the one served longest ago. So
    while several queues have work, the slots they hold follow their weights (5:1:2 of 8
    slots: 5, 1 and 2), and each one's share of the jobs run with them; a queue that
    holds none is served before any that holds one, and none is starved;
  - ``round_robin``: the same with every weight 1: equal shares, and with more queues
    asking than slots, turns in the order they were last served.

* **Fetch-next.** A finishing job may fetch the next job of its queue in the same call
  (:meth:`PoolMember.keep`) when the order, counting its queue without the slot it is
  about to free, gives the slot to its queue again, or when its queue would hold less
  than one slot more than the least served asking queue and that one holds slots
  already: while the shares are as the order wants them, a busy slot stays with its
  queue and is refilled in the same round trip, as without a pool. Otherwise the slot
  goes at once to the queue the order names (which picks up while the finish is
  written), and its greenlet ends with the finish. So a queue that got the slots while
  the others were idle gives them back, by the order, as its jobs finish.

* **Turns.** With ``turn`` above 1 (the pool's setting, default 1), a slot runs that many
  jobs of its queue in a row by fetch-next before the order decides as above: when more
  queues ask than there are slots, the order would move nearly every freed slot, each
  move a pick-up call of its own; turns make it one move in ``turn`` jobs, the shares
  over time unchanged.

* A queue's own rate limit and the queue's global concurrency are honoured by its own
  pick-up script: a pick-up that brings fewer jobs than granted gives the rest back.

* **Cost.** The asking queues wait in a heap by the order's key, so a choice (a grant, or
  a finishing job's keep) reads a few entries whatever the number of queues with work:
  1,000 busy tenant queues cost a choice what 10 do. While a finishing job's queue holds,
  without its slot, less than one slot for its weight more than every asking queue holds,
  and each of those holds one at least, its keep needs no look at all (``weighted`` and
  ``round_robin``; the budget keeps a lower bound of the asking queues' shares): 100 busy
  queues of one or two slots each keep their slots at the cost of a comparison a job.

Everything runs on the hub of the pool's workers: no locks.
"""
from __future__ import annotations

import heapq
import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

log = logging.getLogger("echomq_gevent.worker")

__all__ = ["PoolBudget", "PoolMember", "POOL_ORDERS", "DEFAULT_TURN", "check_pool"]

#: The orders a pool hands its free slots out in.
POOL_ORDERS = ("strict", "weighted", "round_robin")
#: The jobs a slot runs for its queue in a row before the order may give it to another.
DEFAULT_TURN = 1


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_pool(concurrency: Any, order: Any, weights: Optional[Mapping[str, Any]], queues: Any,
               turn: Any = DEFAULT_TURN) -> Optional[tuple]:
    """Check a pool's settings. None when valid, else ``(key, message)``: the key of the
    setting that is wrong (``concurrency``, ``order``, ``turn``, ``weights``, ``("weights",
    queue)`` or ``queues``) and what to do. Used by :class:`PoolBudget` and the YAML checks."""
    if not _positive_int(concurrency):
        return "concurrency", f"must be a whole number of slots, at least 1, got {concurrency!r}"
    if order not in POOL_ORDERS:
        return "order", f"must be one of {', '.join(POOL_ORDERS)}, got {order!r}"
    if not _positive_int(turn):
        return "turn", f"must be a whole number of jobs, at least 1, got {turn!r}"
    names = list(queues) if queues is not None else []
    if weights is not None:
        if not isinstance(weights, Mapping):
            return "weights", f"must be a mapping from queue name to a whole number, got {weights!r}"
        for name, weight in weights.items():
            if name not in names:
                return ("weights", name), (f"queue {name!r} is not in this pool's queues ({', '.join(map(str, names))});"
                                           f" add it to queues or remove its weight")
            if not _positive_int(weight):
                return ("weights", name), f"must be a whole number, at least 1, got {weight!r}"
        if weights and order != "weighted":
            return "weights", f"weights are read with order: weighted only (this pool's order is {order})"
    return None


def _stays(share: float, least: float, least_holds: bool, weight: int) -> bool:
    """The order's rule for a finishing job's slot (``weighted``, ``round_robin``): it stays
    with its queue, which holds ``share`` slots for its ``weight`` without it, when that is
    fewer than ``least``, the share of the least served asking queue; or, while that queue
    holds slots already (``least_holds``), less than one slot more (no pick-up more for
    nothing). A queue that holds none takes its turn."""
    return share < least or (least_holds and share < least + 1 / weight)


class PoolMember:
    """One queue's part of a :class:`PoolBudget`, held by its fetch loop.

    ``held``: slots of this queue in use (job greenlets); ``granted``: slots granted and not
    yet taken by a pick-up; ``want``: slots the fetch loop asks for (0: not asking).
    ``cap``: the queue's own concurrency; ``weight``: its weight (``weighted``).
    """

    __slots__ = ("budget", "name", "cap", "weight", "index", "held", "granted", "want", "last", "wake",
                 "served", "left", "early", "entry")

    def __init__(self, budget: "PoolBudget", name: str, cap: int, weight: int, index: int,
                 wake: Callable[[], None]) -> None:
        self.budget = budget
        self.name = name
        self.cap = cap
        self.weight = weight
        self.index = index
        self.held = 0
        self.granted = 0
        self.want = 0
        #: when it was last served (the budget's count of grants then): the older, the sooner
        self.last = -1
        #: wakes the queue's fetch loop (a grant came)
        self.wake = wake
        #: slots granted to this queue since it joined (status, tests)
        self.served = 0
        #: the queue left the pool (:meth:`leave`): its slots were given back then
        self.left = False
        #: slots given back by :meth:`keep` whose greenlets have not ended yet
        self.early = 0
        #: the tie-breaker of its current entry in the budget's heap (0: none); its older
        #: entries are dropped as they come up
        self.entry = 0

    def __repr__(self) -> str:
        return f"<PoolMember {self.name!r} held={self.held} granted={self.granted} want={self.want} cap={self.cap}>"

    # -- the fetch loop ----------------------------------------------------------------
    def request(self, want: int) -> int:
        """The fetch loop has work and room for ``want`` jobs: the slots granted to it now
        (0: none is free; the loop waits, and is woken when one is granted). The slots
        returned are taken by the pick-up (:meth:`start_slot`) and the rest given back
        with :meth:`fetched`."""
        budget = self.budget
        if self.granted == 0:
            self.want = max(0, want)
            if self.want:
                budget._ready[self] = None
                budget._touch(self)
            budget._dispatch()
        if self.granted:
            self.want = 0
            budget._ready.pop(self, None)
        return self.granted

    def fetched(self) -> None:
        """After a pick-up: the grants it did not use go back to the pool."""
        if self.granted:
            self.budget._give_back(self.granted)
            self.granted = 0
            self.budget._touch(self)
            self.budget._dispatch()

    def withdraw(self) -> None:
        """The fetch loop does something else than wait for a grant (it waits on its
        marker, is rate limited, paused, closing or full): it asks for nothing, and a
        grant that came meanwhile goes to the next queue."""
        budget = self.budget
        if self.want:
            self.want = 0
            budget._ready.pop(self, None)
        if self.granted:
            budget._give_back(self.granted)
            self.granted = 0
            budget._dispatch()

    def start_slot(self) -> None:
        """A job starts in a new slot of this queue: a grant becomes a slot in use (a job
        taken without a grant, e.g. one found after a lost answer, is counted too)."""
        self.held += 1
        if self.left:
            return
        budget = self.budget
        if self.granted:
            self.granted -= 1
        else:  # taken without a grant: its share grew
            budget.used += 1
            budget._touch(self)
        if budget.used > budget.peak:
            budget.peak = budget.used

    def end_slot(self) -> None:
        """A slot of this queue ended (its greenlet ran its last job): the slot is free
        and goes to the next queue by the order (unless :meth:`keep` gave it already)."""
        if self.early:
            self.early -= 1
            return
        self.held -= 1
        if self.left:
            return
        self.budget._give_back(1)
        self.budget._touch(self)
        self.budget._dispatch()

    def keep(self, streak: int = 0) -> bool:
        """A job of this queue is finishing: True when its slot should fetch the next job
        of this queue in the same call (its turn goes on, or the order gives the slot to
        this queue again); False gives the slot to the queue the order names at once, and
        the slot's greenlet ends once the finish is written. ``streak``: the jobs of this
        queue the slot ran before this one, in a row."""
        budget = self.budget
        if self.left:
            return True
        if budget.used <= budget.concurrency and (
                not budget._ready or ((streak + 1) % budget.turn and self.held <= self.cap)):
            return True  # nobody else asks, or the slot's turn is not over
        low = budget._low
        # the order gives the slot back to this queue: told without a look when the order's
        # rule holds against the lower bound of the asking queues' shares (it then holds
        # against the least of them; a bound above 0 says they all hold slots)
        stays = budget.used <= budget.concurrency and (
            (low is not None and self.held <= self.cap
             and _stays((self.held - 1 + self.granted) / self.weight, low, low > 0, self.weight))
            or budget._choose(self) is self)
        if not stays:
            # the slot goes (or, the budget lowered, is given up) now, not when the finish
            # is written: the next finishing job sees it gone, and the queue it goes to
            # picks up meanwhile (the job that frees it has left its processor already)
            self.held -= 1
            self.early += 1
            budget._give_back(1)
            budget._touch(self)
            budget._dispatch()
            return False
        budget._seq += 1
        self.last = budget._seq
        self.served += 1
        if not self.entry:  # its key only grew: an entry it has is mended when it comes up
            budget._touch(self)
        return True

    def set_cap(self, cap: int) -> None:
        """The queue's own concurrency changed: its cap inside the pool."""
        self.cap = cap
        self.budget._touch(self)
        self.budget._dispatch()

    def leave(self) -> None:
        """The queue's worker closed (or its queue is gone): it leaves the pool."""
        if self.left:
            return
        self.withdraw()
        self.left = True
        budget = self.budget
        budget._give_back(max(0, self.held))  # slots whose greenlets never ended (killed at the close)
        budget._leave(self)
        budget._dispatch()


class PoolBudget:
    """The shared slots of one pool (see the module's docstring).

    ``concurrency``: the slots of the pool; ``order``: one of :data:`POOL_ORDERS`;
    ``weights``: queue name -> weight (``weighted``; 1 for a queue not named). Workers
    join with :meth:`join` (the :class:`~echomq_gevent.worker.Worker` does it when made
    with ``pool=``), in the pool's queue order. ``shared``: what else the pool's workers
    share (its lock renewal), kept here for them.
    """

    def __init__(self, concurrency: int, order: str = "weighted", weights: Optional[Mapping[str, int]] = None,
                 name: str = "default", queues: Optional[List[str]] = None, turn: int = DEFAULT_TURN) -> None:
        problem = check_pool(concurrency, order, weights, queues if queues is not None else list(weights or ()), turn)
        if problem is not None:
            key, message = problem
            key = ".".join(key) if isinstance(key, tuple) else key
            raise ValueError(f"pool {name!r}: {key} {message}")
        self.name = name
        self.concurrency = concurrency
        self.order = order
        #: the jobs a slot runs for its queue in a row before the order may move it
        self.turn = turn
        self.weights: Dict[str, int] = dict(weights or {})
        self.members: List[PoolMember] = []
        #: slots in use or granted
        self.used = 0
        #: the most slots in use or granted at once (status, tests)
        self.peak = 0
        #: the members asking for slots, in the order they asked
        self._ready: Dict[PoolMember, None] = {}
        #: grants so far (each member's ``last`` is a value of it)
        self._seq = 0
        #: the asking members by the order (see :meth:`_best`): a heap of ``(key, n,
        #: member)``, an entry pushed at each change of a member's key; entries of members
        #: that left ``_ready`` or whose key changed since are dropped as they come up
        self._heap: List[Tuple[Any, int, PoolMember]] = []
        #: entries pushed so far (breaks ties between equal keys: the first pushed first)
        self._pushes = 0
        #: ``weighted`` and ``round_robin``: at most the fewest slots for its weight any
        #: asking queue under its cap holds (None: not known), so a finishing job's keep
        #: can tell without a look that the slot stays. Set by a choice, which knows the
        #: least; lowered by :meth:`_touch` at every change that lowers a queue's share or
        #: brings it in (a grant, a kept slot, only raise one)
        self._low: Optional[float] = None
        self._next_index = 0
        #: the pool's shared lock renewal (:mod:`.shared_locks`), made by its first worker
        self.lock_renewal: Any = None
        #: the finish batcher its workers share (``FinishBatcher.for_pool``), made by its first worker
        self.finish_batcher: Any = None

    def __repr__(self) -> str:
        return (f"<PoolBudget {self.name!r} {self.order} used={self.used}/{self.concurrency} "
                f"queues={len(self.members)}>")

    @property
    def free(self) -> int:
        return max(0, self.concurrency - self.used)

    def join(self, name: str, cap: int, wake: Callable[[], None]) -> PoolMember:
        """A worker of queue ``name`` joins; ``cap`` is its own concurrency, ``wake`` wakes
        its fetch loop. Members are served in the order they joined (``strict``)."""
        member = PoolMember(self, name, cap, int(self.weights.get(name, 1)), self._next_index, wake)
        self._next_index += 1
        self.members.append(member)
        return member

    def set_concurrency(self, value: int) -> None:
        """Change the pool's slots while it runs: more are handed out at once; with fewer,
        running jobs finish and their slots are not refilled until the pool is below it."""
        if not _positive_int(value):
            raise ValueError(f"pool {self.name!r}: concurrency must be a whole number, at least 1, got {value!r}")
        self.concurrency = value
        if self.finish_batcher is not None:
            self.finish_batcher.concurrency = value
        self._dispatch()

    def usage(self) -> List[Dict[str, Any]]:
        """What each queue uses now: ``{queue, in_use, cap, weight, served}``, in pool order."""
        return [{"queue": m.name, "in_use": m.held, "cap": m.cap, "weight": m.weight, "served": m.served}
                for m in self.members]

    # -- the hand-out --------------------------------------------------------------------
    def _give_back(self, n: int) -> None:
        self.used -= n

    def _leave(self, member: PoolMember) -> None:
        if member in self.members:
            self.members.remove(member)
        self._ready.pop(member, None)

    def _dispatch(self) -> None:
        """Hand the free slots to the asking queues by the order; wake those served."""
        woken: List[PoolMember] = []
        ready = self._ready
        while self.used < self.concurrency and ready:
            member = self._choose(None)
            if member is None:
                break
            self._seq += 1
            member.last = self._seq
            member.granted += 1
            member.served += 1
            self.used += 1
            member.want -= 1
            if member.want <= 0 or member.held + member.granted >= member.cap:
                member.want = 0
                ready.pop(member, None)
            elif not member.entry:  # its key only grew: an entry it has is mended when it comes up
                self._touch(member)
            if member not in woken:
                woken.append(member)
        for member in woken:
            member.wake()

    # -- the order: a heap, so a choice costs the log of the queues asking, not their number
    def _key(self, m: PoolMember) -> Any:
        """Where ``m`` stands: ``strict``, its place in the pool; otherwise the slots it holds
        for its weight, then when it was last served (the older, the sooner)."""
        if self.order == "strict":
            return m.index
        return ((m.held + m.granted) / m.weight, m.last)

    def _touch(self, m: PoolMember) -> None:
        """``m``'s key may have changed, or it may be under its cap again: if it asks,
        give it an entry with its key now (the older ones are dropped when they come up).
        Every change that lowers a key or brings a queue in comes here; a change that only
        raises one may leave the entry as it is (:meth:`_best` mends it)."""
        if m not in self._ready:
            return
        key = self._key(m)
        if self.order != "strict" and self._low is not None and key[0] < self._low:
            self._low = key[0]
        self._pushes += 1
        m.entry = self._pushes
        heapq.heappush(self._heap, (key, self._pushes, m))
        if len(self._heap) > 2 * len(self._ready) + 64:  # mostly stale entries: start again
            self._rebuild()

    def _rebuild(self) -> None:
        heap = []
        for m in self.members:
            m.entry = 0
        for m in self._ready:
            if m.held + m.granted < m.cap:
                self._pushes += 1
                m.entry = self._pushes
                heap.append((self._key(m), self._pushes, m))
        heapq.heapify(heap)
        self._heap = heap

    def _best(self, skip: Optional[PoolMember]) -> Tuple[Optional[PoolMember], Any]:
        """The asking member under its cap that the order puts first, other than ``skip``,
        and its key (``(None, None)``: none)."""
        heap, ready = self._heap, self._ready
        skipped = []
        found: Tuple[Optional[PoolMember], Any] = (None, None)
        while heap:
            key, n, m = heap[0]
            if n != m.entry:  # an older entry: the change since pushed the current one
                heapq.heappop(heap)
            elif m not in ready or m.held + m.granted >= m.cap:
                heapq.heappop(heap)  # back in the heap when it asks, or a slot of its ends (_touch)
                m.entry = 0
            elif key != (now := self._key(m)):  # its key grew since (a kept slot): where it stands now
                self._pushes += 1
                m.entry = self._pushes
                heapq.heapreplace(heap, (now, self._pushes, m))
            elif m is skip:
                skipped.append(heapq.heappop(heap))
            else:
                found = (m, key)
                break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def _choose(self, keeper: Optional[PoolMember]) -> Optional[PoolMember]:
        """The member the next slot goes to, among the asking ones under their cap and
        ``keeper`` (a member whose finishing job holds the slot already, counted without
        it). ``strict``: the first in pool order; otherwise the fewest slots for its weight,
        then the one served longest ago."""
        best, best_key = self._best(keeper)
        if self.order != "strict":  # the least share now, the keeper's own with its slot counted
            low = best_key[0] if best is not None else float("inf")
            if keeper is not None and keeper in self._ready and keeper.held + keeper.granted < keeper.cap:
                low = min(low, (keeper.held + keeper.granted) / keeper.weight)
            self._low = low
        if keeper is not None and keeper.held <= keeper.cap:
            if self.order == "strict":
                if best is None or keeper.index < best_key:
                    best = keeper
            else:
                share = (keeper.held - 1 + keeper.granted) / keeper.weight
                if best is None or _stays(share, best_key[0], best.held + best.granted > 0, keeper.weight):
                    best = keeper
        return best

"""Script wrappers of the job schedulers (BullMQ 6's ``upsertJobScheduler`` and friends,
``docs/schedulers.md``): the ``schedulers`` part of
:class:`~echomq_gevent.protocol.scripts.Scripts`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .calls import ScriptCall
from .library import pack

__all__ = ["SchedulerScripts", "UPDATE_MANY_MAX"]

#: Most next runs one ``updateJobSchedulerMany-11`` call creates (some 0.4 ms of Redis time):
#: a burst's calls go together in one round trip, and Redis answers each as it ends.
UPDATE_MANY_MAX = 25


class SchedulerScripts:
    """The job-scheduler scripts of one queue; made by its :class:`~echomq_gevent.protocol.scripts.Scripts`."""

    __slots__ = ("scripts", "keys")

    def __init__(self, scripts: Any) -> None:
        #: the :class:`~echomq_gevent.protocol.scripts.Scripts` these calls go through
        self.scripts = scripts
        self.keys = scripts.keys

    def _scheduler_keys(self) -> List[str]:
        k = self.keys
        return [k.repeat, k.delayed, k.wait, k.paused, k.meta, k.prioritized, k.marker, k.id, k.events, k.pc]

    def add_job_scheduler(self, scheduler_id: str, next_millis: Optional[int], scheduler: Dict[str, Any],
                          template_data_json: str, template_opts: Dict[str, Any], run_opts: Dict[str, Any],
                          now_ms: int) -> Tuple[str, int]:
        """``addJobScheduler-11``: create or replace a scheduler and its upcoming run.
        ``scheduler``, ``template_opts`` and ``run_opts`` are msgpack maps (stored option
        names). Returns (run job id, delay ms); raises SchedulerJobIdCollision (-10) or
        SchedulerJobSlotsBusy (-11)."""
        keys = self._scheduler_keys() + [self.keys.active]
        args = ["" if next_millis is None else int(next_millis), pack(scheduler), scheduler_id,
                template_data_json, pack(template_opts), pack(run_opts), int(now_ms), self.keys.base, ""]
        res = self.scripts.check("addJobScheduler-11", self.scripts.call("addJobScheduler-11", keys, args), scheduler_id)
        return str(res[0]), int(res[1])

    def update_job_scheduler_call(self, scheduler_id: str, next_millis: Optional[int], run_opts: Dict[str, Any],
                                  now_ms: int, producer_id: str) -> ScriptCall:
        """``updateJobScheduler-12``: after the run ``producer_id`` was taken, the call that
        creates the next one (answer: its id, or nil when the scheduler is gone, the run is
        not its upcoming one, or the next run exists). Run it alone or with others
        (:meth:`Scripts.run_many <echomq_gevent.protocol.scripts.Scripts.run_many>`,
        :meth:`update_job_scheduler_many`). The data argument is ``{}``: the script creates
        the run with the data the scheduler stores, as BullMQ's does, and reads nothing of it."""
        keys = self._scheduler_keys() + [self.keys.job(producer_id), self.keys.active]
        args = ["" if next_millis is None else int(next_millis), scheduler_id, "{}", pack(run_opts),
                int(now_ms), self.keys.base, producer_id]
        return ScriptCall("updateJobScheduler-12", keys, args)

    def update_job_scheduler_many(self, calls: Sequence[ScriptCall]) -> List[Any]:
        """Several ``updateJobScheduler-12`` calls of this queue (from
        :meth:`update_job_scheduler_call`) as ``updateJobSchedulerMany-11``: each next run
        created as its own call would create it, one after the other, in calls of at most
        :data:`UPDATE_MANY_MAX` runs sent in one round trip. The answers in order: the id
        of the run created, None where the call would have answered nil, or the error its
        creation raised (a ``ResponseError``). A connection error raises."""
        # updateJobScheduler-12's ARGV without the data (3rd, unused) and the prefix (said once)
        rows = [(a[0], a[1], a[3], a[4], a[6]) for a in (c.args for c in calls)]
        answers = self.scripts.run_rows("updateJobSchedulerMany-11", self._scheduler_keys() + [self.keys.active],
                                        [self.keys.base], rows, UPDATE_MANY_MAX)
        return [None if a == 0 else a if isinstance(a, BaseException) else str(a) for a in answers]

    def remove_job_scheduler(self, scheduler_id: str) -> bool:
        """``removeJobScheduler-3``: True when the scheduler existed (and is now gone)."""
        k = self.keys
        return int(self.scripts.call("removeJobScheduler-3", [k.repeat, k.delayed, k.events],
                             [scheduler_id, k.base])) == 0

    def get_job_scheduler(self, scheduler_id: str) -> Tuple[Optional[Dict[str, str]], Optional[int]]:
        """``getJobScheduler-1``: (the scheduler hash, millis of its upcoming run), or
        (None, None) when there is no such scheduler."""
        res = self.scripts.call("getJobScheduler-1", [self.keys.repeat], [scheduler_id])
        if not res or res[1] is None:
            return None, None
        flat = res[0] or []
        it = iter(flat)
        return dict(zip(it, it)), int(float(res[1]))

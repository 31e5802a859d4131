"""What a script call is, before it is sent: :class:`ScriptCall`, a batch of them
(:class:`ScriptBatch`), and which scripts may be sent again when their answer was lost
(:data:`RESEND_SAFE`, ``docs/reliability.md``). :mod:`.scripts` sends them."""
from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

__all__ = ["ScriptCall", "ScriptBatch", "RESEND_SAFE", "ADD_SCRIPTS"]


class ScriptCall(NamedTuple):
    """One script call, built by a :class:`Scripts` method named ``*_call`` and run by
    :meth:`Scripts.run` or, with others, :meth:`Scripts.run_many`. ``job_id`` names the
    job in the error a negative answer turns into."""

    name: str
    keys: List[Any]
    args: List[Any]
    job_id: Optional[str] = None


class ScriptBatch:
    """Script calls collected to be sent in one round trip (:meth:`Scripts.batch`).

    ``add`` calls, then ``execute`` once: the answers come back in order, a script error
    in place of its answer (negative codes are left as numbers for the caller to read)."""

    def __init__(self, scripts: Any) -> None:  # a Scripts (which imports this module)
        self.scripts = scripts
        self.calls: List[ScriptCall] = []

    def add(self, call: ScriptCall) -> None:
        self.calls.append(call)

    def __len__(self) -> int:
        return len(self.calls)

    def execute(self) -> List[Any]:
        calls, self.calls = self.calls, []
        return self.scripts.run_many(calls, check=False)


#: Scripts that may be sent again when a connection failed after the call was written (so
#: Redis may or may not have run it): read-only ones, and ones whose second run changes
#: nothing (guarded by a token, a state check or a time window). Every other script is
#: never re-sent after such a failure; the caller reads the state back instead. The add
#: scripts count as safe only with a custom job id (a second add of the same id is refused
#: as a duplicate); with an automatic id a second run would add a second job.
#: ``docs/reliability.md`` has the table with the reason for each script.
RESEND_SAFE = frozenset({
    "getCounts-1", "getState-8", "getStateV2-8", "isFinished-3",   # read only
    "getDependencyCounts-4", "paginate-1",      # read only
    "getOldestJobTimestamp-1",                  # read only
    "extendLock-2", "extendLocks-1",            # set the lock only while the token matches
    "moveStalledJobsToWait-9",                  # one run per stalled_interval (stalled-check key)
    "pause-7",                                  # sets or clears the paused flag
    "updateProgress-3", "updateData-1",         # overwrite a field (a second progress event at most)
    "changeDelay-4",                            # absolute due time from the caller's clock
    "changePriority-7",                         # the same priority again
    "removeJob-2",                              # 1 for an id that is gone
    "drain-5", "obliterate-2", "moveJobsToWait-8",  # their callers loop until nothing is left
})
#: The add scripts (safe to re-send only with a custom job id).
ADD_SCRIPTS = frozenset({"addStandardJob-9", "addDelayedJob-6", "addPrioritizedJob-9"})

"""The flow scripts (parents and children): the ``flows`` part of
:class:`~echomq_gevent.protocol.scripts.Scripts`.

The calls that FlowProducer and the flow methods of Job make: ``addParentJob-6``,
``releaseParentIfNoPendingDependencies-2``, ``moveToWaitingChildren-7``,
``getDependencyCounts-4``, ``paginate-1``, ``removeChildDependency-1`` and
``removeUnprocessedChildren-2``. Names, KEYS and ARGV are BullMQ 6.7.0's (see
``docs/protocol.md``). Every method may be called from any greenlet.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = ["FlowScripts", "DEPENDENCY_GROUPS", "ScriptCall"]

#: The groups a parent's children fall in, as Node names them: ``processed`` (completed,
#: ``<id>:processed``), ``unprocessed`` (pending, ``<id>:dependencies``), ``ignored``
#: (failed with ignoreDependencyOnFailure/continueParentOnFailure, ``<id>:failed``),
#: ``failed`` (failed with failParentOnFailure, ``<id>:unsuccessful``).
DEPENDENCY_GROUPS = ("processed", "unprocessed", "ignored", "failed")

#: One script call not sent yet: (script name, KEYS, ARGV).
ScriptCall = Tuple[str, List[str], List[Any]]


class FlowScripts:
    """The flow scripts of one queue; made by its :class:`~echomq_gevent.protocol.scripts.Scripts`."""

    __slots__ = ("scripts", "keys")

    def __init__(self, scripts: Any) -> None:
        #: the :class:`~echomq_gevent.protocol.scripts.Scripts` these calls go through
        self.scripts = scripts
        self.keys = scripts.keys

    # -- adding a flow ---------------------------------------------------------------
    def add_parent_job_keys(self) -> List[str]:
        """KEYS of ``addParentJob-6`` for this queue (ARGV as the other add scripts)."""
        k = self.keys
        return [k.meta, k.id, k.delayed, k.waiting_children, k.completed, k.events]

    def release_parent_call(self, parent_id: str, now_ms: int) -> ScriptCall:
        """``releaseParentIfNoPendingDependencies-2`` for a parent in this queue, as a call
        to queue at the end of a flow's transaction."""
        k = self.keys
        return ("releaseParentIfNoPendingDependencies-2",
                [k.job(parent_id), k.dependencies(parent_id)],
                [k.queue_key, parent_id, int(now_ms)])

    # -- a parent's processor -----------------------------------------------------------
    def move_to_waiting_children(self, job_id: str, token: str, now_ms: int,
                                 child_key: str = "") -> bool:
        """``moveToWaitingChildren-7``: True when the job moved to waiting-children, False
        when no child (or not ``child_key``) is pending and the job stays active. Raises
        JobNotExist, JobLockNotExist, JobLockMismatch, JobNotInState or
        JobHasFailedChildren."""
        k = self.keys
        keys = [k.active, k.waiting_children, k.job(job_id), k.dependencies(job_id),
                k.unsuccessful(job_id), k.stalled, k.events]
        res = self.scripts.call("moveToWaitingChildren-7", keys,
                        [token, child_key or "", int(now_ms), job_id, k.base])
        return self.scripts.check("moveToWaitingChildren-7", res, job_id) == 0

    def get_dependency_counts(self, job_id: str, groups: Sequence[str]) -> List[int]:
        """``getDependencyCounts-4``: one count per group name (see DEPENDENCY_GROUPS)."""
        k = self.keys
        keys = [k.processed(job_id), k.dependencies(job_id), k.failed_children(job_id),
                k.unsuccessful(job_id)]
        return [int(x) for x in self.scripts.call("getDependencyCounts-4", keys, list(groups))]

    def paginate(self, key: str, start: int, end: int, cursor: str = "0", passed: int = 0,
                 max_scans: int = 5, fetch_jobs: bool = False) -> List[Any]:
        """``paginate-1`` once: ``[cursor, passed, items, total, jobs]`` (see the script)."""
        args: List[Any] = [int(start), int(end), str(cursor), int(passed), int(max_scans)]
        if fetch_jobs:
            args.append(1)
        return list(self.scripts.call("paginate-1", [key], args))

    def remove_child_dependency(self, job_id: str, parent_key: str) -> bool:
        """``removeChildDependency-1``: True when the job was a pending child of
        ``parent_key`` and no longer is; False when it was not listed there. Raises
        JobNotExist (-1) or ParentJobNotExist (-5)."""
        k = self.keys
        res = self.scripts.call("removeChildDependency-1", [k.base], [k.job(job_id), parent_key])
        return self.scripts.check("removeChildDependency-1", res, job_id) == 0

    def remove_unprocessed_children(self, job_id: str) -> None:
        """``removeUnprocessedChildren-2``: remove the job's pending children (not locked,
        not failed), depth first."""
        k = self.keys
        self.scripts.call("removeUnprocessedChildren-2", [k.job(job_id), k.meta], [k.base, job_id])

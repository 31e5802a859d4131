"""The flow calls of a :class:`~echomq_gevent.queue.job.Job`: a parent reads and manages its children.

The ``children`` part of ``Job`` (so ``job.py`` stays about one job). The answers have the
shapes of Node BullMQ's ``Job`` methods of the same names, so code and tests can
compare them across runtimes. Children are named by their full job key
(``"bull:images:42"``), as BullMQ stores them.

Call these from the job's processor greenlet or from any other greenlet or thread.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Union

from ..protocol.clock import now_ms
from ..errors import EchoMQError, InvalidJobDataError, ScriptError
from ..protocol.flows import DEPENDENCY_GROUPS
from .explain import explain

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

__all__ = ["JobChildren", "parse_child_values"]

#: What Node's ``getDependencies`` reads per page when a group gives no ``count``.
DEFAULT_PAGE = 20

Page = Union[bool, Mapping[str, Any], None]


def parse_child_values(raw: Mapping[str, str], parent: str, what: str) -> Dict[str, Any]:
    """The JSON values of a ``<job>:processed`` hash, by child key (Node's
    ``parseObjectValues``). A value that is not JSON raises InvalidJobDataError naming the
    parent and the child (Node throws a SyntaxError there too)."""
    out: Dict[str, Any] = {}
    for child, text in raw.items():
        try:
            out[child] = json.loads(text)
        except ValueError as exc:
            raise InvalidJobDataError(
                f"{what} of job {parent}: the stored result of child {child!r} is not valid JSON "
                f"({exc}): {text[:80]!r}") from None
    return out


def _page_opts(group: str, value: Page) -> Optional[Dict[str, int]]:
    """``{"cursor", "count"}`` for one group of get_dependencies, or None when not asked."""
    if value is None or value is False:
        return None
    opts = {"cursor": 0, "count": DEFAULT_PAGE}
    if value is True:
        return opts
    if not isinstance(value, Mapping):
        raise EchoMQError(f"get_dependencies: {group} must be True or a mapping "
                          f"{{'cursor': int, 'count': int}}, got {value!r}")
    unknown = set(value) - {"cursor", "count"}
    if unknown:
        raise EchoMQError(f"get_dependencies: {group} takes only 'cursor' and 'count', "
                          f"not {sorted(unknown)}")
    for name in ("cursor", "count"):
        if name in value:
            v = value[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise EchoMQError(f"get_dependencies: {group}.{name} must be an integer >= 0, got {v!r}")
            opts[name] = v
    return opts


class JobChildren:
    """The parent/child calls of one job (``job.children``); :class:`~echomq_gevent.queue.job.Job`'s methods of the same names call these."""

    __slots__ = ("job",)

    def __init__(self, job: "Job") -> None:
        self.job = job

    # -- reading the children --------------------------------------------------------
    def get_children_values(self) -> Dict[str, Any]:
        """The return values of the children that completed, by child key (Node's
        ``getChildrenValues``): ``{"bull:q:7": {...}, ...}``; ``{}`` without children."""
        raw = self.job.scripts.client.hgetall(self.job.scripts.keys.processed(self.job.id))
        return parse_child_values(raw, self.job.id, "get_children_values")

    def get_ignored_children_failures(self) -> Dict[str, str]:
        """The failed reasons of children whose failure the parent did not fail for
        (``ignoreDependencyOnFailure``, ``continueParentOnFailure``), by child key."""
        return dict(self.job.scripts.client.hgetall(self.job.scripts.keys.failed_children(self.job.id)))

    def get_failed_children_values(self) -> Dict[str, str]:
        """The same as :meth:`get_ignored_children_failures` (Node 6.7.0 keeps this older
        name for it)."""
        return self.get_ignored_children_failures()

    def get_dependencies(self, processed: Page = None, unprocessed: Page = None,
                         ignored: Page = None, failed: Page = None) -> Dict[str, Any]:
        """The children of this job, by group (Node's ``getDependencies``).

        Without arguments every child is returned: ``{"processed": {key: value},
        "unprocessed": [key, ...], "ignored": {key: reason}, "failed": [key, ...]}``
        (``failed`` = failed with failParentOnFailure, ``ignored`` = failures the
        parent went on without).

        Naming groups asks for pages of those groups only: each is ``True`` or
        ``{"cursor": c, "count": n}`` (defaults 0 and 20). The answer holds the named
        groups and, for each, the cursor of the next page: ``nextProcessedCursor``,
        ``nextUnprocessedCursor``, ``nextIgnoredCursor`` (scan cursors: 0 when the
        walk is complete; ``count`` is only a hint to Redis) and ``nextFailedCursor``
        (an offset: cursor + count).
        """
        keys = self.job.scripts.keys
        client = self.job.scripts.client
        pages = {g: _page_opts(g, v) for g, v in zip(DEPENDENCY_GROUPS, (processed, unprocessed, ignored, failed))}
        pipe = client.pipeline(transaction=False)
        if not any(pages.values()):
            pipe.hgetall(keys.processed(self.job.id))
            pipe.smembers(keys.dependencies(self.job.id))
            pipe.hgetall(keys.failed_children(self.job.id))
            pipe.zrange(keys.unsuccessful(self.job.id), 0, -1)
            done, pending, ignored_raw, failed_keys = pipe.execute()
            return {"processed": parse_child_values(done, self.job.id, "get_dependencies"),
                    "unprocessed": sorted(pending), "failed": list(failed_keys),
                    "ignored": dict(ignored_raw)}
        asked = [g for g in DEPENDENCY_GROUPS if pages[g]]
        for group in asked:
            page = pages[group]
            assert page is not None
            if group == "processed":
                pipe.hscan(keys.processed(self.job.id), page["cursor"], count=page["count"])
            elif group == "unprocessed":
                pipe.sscan(keys.dependencies(self.job.id), page["cursor"], count=page["count"])
            elif group == "ignored":
                pipe.hscan(keys.failed_children(self.job.id), page["cursor"], count=page["count"])
            else:
                pipe.zrange(keys.unsuccessful(self.job.id), page["cursor"], page["count"] - 1)
        out: Dict[str, Any] = {}
        for group, res in zip(asked, pipe.execute()):
            if group == "processed":
                out["processed"] = parse_child_values(res[1], self.job.id, "get_dependencies")
                out["nextProcessedCursor"] = int(res[0])
            elif group == "unprocessed":
                out["unprocessed"] = list(res[1])
                out["nextUnprocessedCursor"] = int(res[0])
            elif group == "ignored":
                out["ignored"] = dict(res[1])
                out["nextIgnoredCursor"] = int(res[0])
            else:
                page = pages["failed"]
                assert page is not None
                out["failed"] = list(res)
                out["nextFailedCursor"] = page["cursor"] + page["count"]
        return out

    def get_dependencies_count(self, processed: bool = False, unprocessed: bool = False,
                               ignored: bool = False, failed: bool = False) -> Dict[str, int]:
        """How many children are in each group (Node's ``getDependenciesCount``); only
        the groups named, or all four when none is."""
        flags = dict(zip(DEPENDENCY_GROUPS, (processed, unprocessed, ignored, failed)))
        groups = [g for g in DEPENDENCY_GROUPS if flags[g]] or list(DEPENDENCY_GROUPS)
        counts = self.job.scripts.flows.get_dependency_counts(self.job.id, groups)
        return dict(zip(groups, counts))

    # -- a parent's processor waits for its children ----------------------------------
    def move_to_waiting_children(self, token: Optional[str] = None,
                                 child: Optional[Mapping[str, str]] = None) -> bool:
        """Park this active job in waiting-children until its children are done (Node's
        ``moveToWaitingChildren``). Returns True when it moved: the processor must then
        raise :class:`~echomq_gevent.errors.WaitingChildrenError` so the worker leaves
        the job alone; it runs again, from the start, once the last child finishes.
        Returns False when no child is pending (the job stays active: go on and finish).

        ``token`` defaults to the worker's lock token on this job (``job.token``).
        ``child`` (``{"id", "queue"}`` with queue = ``"<prefix>:<name>"``) waits only
        when that one child is still pending. Raises JobHasFailedChildren when a child
        failed with failParentOnFailure, JobLockMismatch/JobLockNotExist when the lock
        is not ours, JobNotInState when the job is not active.
        """
        child_key = ""
        if child is not None:
            if not isinstance(child, Mapping) or not child.get("id") or not child.get("queue"):
                raise EchoMQError(f"move_to_waiting_children of job {self.job.id}: child must be "
                                  f"{{'id': ..., 'queue': '<prefix>:<name>'}}, got {child!r}")
            child_key = f"{child['queue']}:{child['id']}"
        lock = token or self.job.token
        if not lock:
            raise EchoMQError(f"move_to_waiting_children of job {self.job.id}: no lock token; pass the "
                              f"worker's token (job.token inside a processor)")
        try:
            return self.job.scripts.flows.move_to_waiting_children(self.job.id, lock, now_ms(), child_key)
        except ScriptError as exc:
            raise explain(self.job, exc, "move it to waiting-children", "active") from None

    # -- changing the links ----------------------------------------------------------
    def remove_child_dependency(self) -> bool:
        """Stop being a pending child of this job's parent (Node's
        ``removeChildDependency``): the parent no longer waits for this job, and this
        job forgets its parent. Returns True when the link was removed, False when the
        parent did not list this job as pending (it already finished). A parent left
        without pending children in waiting-children is released. Raises
        ParentJobNotExist when the parent is gone, JobNotExist when this job is."""
        if not self.job.parent_key:
            raise EchoMQError(f"remove_child_dependency: job {self.job.id} of queue "
                              f"{self.job.queue_qualified_name!r} has no parent")
        try:
            removed = self.job.scripts.flows.remove_child_dependency(self.job.id, self.job.parent_key)
        except ScriptError as exc:
            raise explain(self.job, exc, f"remove its dependency on parent {self.job.parent_key!r}") from None
        if removed:
            self.job.parent = None
            self.job.parent_key = None
        return removed

    def remove_unprocessed_children(self) -> None:
        """Remove every child of this job that has not run yet, and their own pending
        children (Node's ``removeUnprocessedChildren``). Children a worker holds (locked)
        or that failed are kept. When none is left pending and this job waits for
        children, it is released to run."""
        self.job.scripts.flows.remove_unprocessed_children(self.job.id)


"""``enqueued()`` and ``assert_enqueued()``: what a test's code added, without running it."""
from __future__ import annotations

from typing import Any, List, Mapping, Optional

__all__ = ["enqueued", "assert_enqueued", "PENDING_STATES"]

#: the states of a job added and not yet run
PENDING_STATES = ("waiting", "prioritized", "delayed", "waiting-children", "paused")
_UNSET: Any = object()


def enqueued(queue: Any, name: Optional[str] = None) -> List[Any]:
    """The jobs of ``queue`` not run yet (waiting, prioritized, delayed, waiting for
    children), oldest first; only those named ``name`` when given."""
    jobs = queue.get_jobs(list(PENDING_STATES), asc=True)
    jobs.sort(key=lambda j: (j.timestamp, _id_order(j.id)))
    return [j for j in jobs if name is None or j.name == name]


def _id_order(job_id: str) -> Any:
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


def _opts_match(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    return all(k in have and have[k] == v for k, v in want.items())


def assert_enqueued(queue: Any, name: Optional[str] = None, data: Any = _UNSET,
                    opts: Optional[Mapping[str, Any]] = None, count: Optional[int] = None) -> List[Any]:
    """Assert that ``queue`` holds a job not run yet matching what is given: its
    ``name``, its ``data`` (equal), ``opts`` (each given option equal, others ignored);
    exactly ``count`` of them when given, else at least one. Returns the matching jobs.
    The message of a failure lists what the queue holds."""
    jobs = enqueued(queue)
    matching = [j for j in jobs if (name is None or j.name == name)
                and (data is _UNSET or j.data == data) and (opts is None or _opts_match(j.opts, opts))]
    ok = len(matching) == count if count is not None else bool(matching)
    if not ok:
        wanted = ", ".join(part for part in (
            f"name={name!r}" if name is not None else "", f"data={data!r}" if data is not _UNSET else "",
            f"opts containing {dict(opts)!r}" if opts is not None else "") if part) or "any job"
        held = "\n".join(f"  {j.id} {j.name!r} data={j.data!r} opts={j.opts!r}" for j in jobs[:20])
        more = f"\n  ... and {len(jobs) - 20} more" if len(jobs) > 20 else ""
        expected = f"exactly {count}" if count is not None else "at least one"
        raise AssertionError(f"expected {expected} job(s) with {wanted} on queue {queue.name!r}, found "
                             f"{len(matching)}; the queue holds {len(jobs)} job(s) not run yet"
                             + (":\n" + held + more if jobs else ""))
    return matching

"""Reading a parent's children page by page (``paginate-1``), and naming children by key.

:meth:`Queue.get_dependencies <echomq_gevent.queue.Queue.get_dependencies>` and
:class:`~echomq_gevent.queue.flows.FlowProducer` use these; this module imports neither, so the
two can share it. Call from any greenlet.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

from ..errors import EchoMQError
from .job import Job
from ..protocol.keys import QueueKeys
from ..protocol.scripts import Scripts

__all__ = ["parse_job_key", "queue_dependencies"]


def parse_job_key(key: str) -> Tuple[str, str, str]:
    """``"bull:q:42"`` -> ``("bull", "q", "42")``: prefix, queue name and id of a full job
    key (the prefix may itself contain ':'; queue names and ids cannot)."""
    last = key.rfind(":")
    before = key.rfind(":", 0, last) if last > 0 else -1
    if last < 0 or before < 0:
        raise EchoMQError(f"{key!r} is not a job key '<prefix>:<queue>:<id>'")
    return key[:before], key[before + 1:last], key[last + 1:]


def queue_dependencies(queue: Any, parent_id: str, kind: str = "processed", start: int = 0,
                       end: int = -1) -> Dict[str, Any]:
    """One page of a parent's children, read with ``paginate-1`` (Node's
    ``Queue.getDependencies``); :meth:`Queue.get_dependencies` calls this.

    ``kind`` is ``"processed"`` (completed children with their results) or ``"pending"``.
    Returns ``{"items": [...], "total": n, "jobs": [Job, ...]}``: items are
    ``{"id": child key, "v": result}`` for processed children (``"err"`` instead of
    ``"v"`` when the stored result is not JSON) and ``{"id": child key}`` for pending
    ones; ``jobs`` the children's jobs that still exist, in the same order; ``total`` the
    number of children of that kind. Sets have no order: pages of a set that changes
    between calls may overlap or miss children.
    """
    if kind not in ("processed", "pending"):
        raise EchoMQError(f"get_dependencies: kind must be 'processed' or 'pending', got {kind!r}")
    for label, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise EchoMQError(f"get_dependencies: {label} must be an integer (end -1 = to the last), got {value!r}")
    keys = queue.keys
    key = keys.processed(str(parent_id)) if kind == "processed" else keys.dependencies(str(parent_id))
    page_size = end - start + 1 if end >= 0 else None
    cursor, passed, total = "0", 0, 0
    page: List[Any] = []
    raw_jobs: List[Any] = []
    while True:
        cursor, passed, items, total, *rest = queue.scripts.flows.paginate(
            key, start + len(page), end, cursor, passed, 5, fetch_jobs=True)
        cursor, passed, total = str(cursor), int(passed), int(total)
        page.extend(items)
        raw_jobs.extend(rest[0] if rest else [])
        if cursor == "0" or (page_size is not None and len(page) >= page_size):
            break
    out_items: List[Dict[str, Any]] = []
    child_keys: List[str] = []
    for item in page:
        if isinstance(item, list):
            child, text = item
            try:
                out_items.append({"id": child, "v": json.loads(text)})
            except ValueError as exc:
                out_items.append({"id": child, "err": str(exc)})
        else:
            child = item
            out_items.append({"id": child})
        child_keys.append(child)
    jobs: List[Job] = []
    scripts_of = {(queue.prefix, queue.name): queue.scripts}
    for child, flat in zip(child_keys, raw_jobs):
        if flat:
            child_prefix, child_queue, child_id = parse_job_key(child)
            scripts = scripts_of.get((child_prefix, child_queue))
            if scripts is None:
                scripts = scripts_of[(child_prefix, child_queue)] = Scripts(
                    queue.client, QueueKeys(child_queue, child_prefix))
            jobs.append(Job.from_flat(scripts, child_id, flat))
    return {"items": out_items, "total": total, "jobs": jobs}

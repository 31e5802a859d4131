"""What the framework commands print about an outbox (``manage.py echomq_outbox``,
``flask echomq outbox``, ``python -m echomq_gevent.contrib.pyramid INI outbox``): its
numbers and parked rows, and the retry and delete of parked rows. Each call opens a
database connection of its own; nothing here talks to Redis."""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any, List, Optional, Sequence

__all__ = ["run_outbox_command", "ACTIONS"]

ACTIONS = ("list", "retry", "delete")


def _when(ms: Optional[int]) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def run_outbox_command(box: Any, action: str, ids: Sequence[int] = (), all_rows: bool = False,
                       as_json: bool = False, out: Any = None) -> int:
    """Run ``action`` on the outbox ``box`` (a registered Outbox); returns the exit code
    (0, or 2 for a wrong call, with the message on stderr)."""
    out = out or sys.stdout
    if box is None:
        print("the outbox is not switched on for this app (see docs/frameworks.md, 'The outbox')", file=sys.stderr)
        return 2
    if action == "list":
        stats = box.read()
        rows = box.parked()
        if as_json:
            doc = {"waiting": stats.get("waiting"), "oldest_age_s": stats.get("oldest_age_s"),
                   "parked_count": stats.get("parked"), "error": stats.get("error") or None,
                   "parked": [r.as_dict() for r in rows]}
            print(json.dumps(doc, indent=2, sort_keys=True), file=out)
            return 0
        if stats.get("error"):
            print(f"{box.label}: cannot read the outbox: {stats['error']}", file=out)
            return 1
        print(f"{box.label}: {stats['waiting']} row(s) waiting (oldest {stats['oldest_age_s']:.1f} s), "
              f"{stats['parked']} parked", file=out)
        for r in rows:
            print(f"  row {r.id}  queue {r.queue!r}  job {r.name!r}  id {r.job_id}  parked {_when(r.parked_ms)}"
                  f"  after {r.attempts} try(ies): {r.last_error}", file=out)
        return 0
    if action in ("retry", "delete"):
        if not ids and not (all_rows and action == "retry"):
            what = "row ids, or --all" if action == "retry" else "row ids"
            print(f"outbox {action}: name the parked {what}", file=sys.stderr)
            return 2
        if action == "retry":
            n = box.retry(None if all_rows else list(ids))
            print(f"{n} parked row(s) put back to waiting; the relay adds them on its next pass", file=out)
        else:
            n = box.delete(list(ids))
            print(f"{n} parked row(s) deleted; their jobs will not be added", file=out)
        return 0
    print(f"outbox: unknown action {action!r} (one of {', '.join(ACTIONS)})", file=sys.stderr)
    return 2


def parse_ids(values: Sequence[str]) -> List[int]:
    """Row ids from the command line; ValueError naming the one that is not a number."""
    out = []
    for v in values:
        try:
            out.append(int(v))
        except ValueError:
            raise ValueError(f"outbox row id must be a number, got {v!r}") from None
    return out

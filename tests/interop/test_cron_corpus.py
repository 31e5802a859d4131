"""Cron next-run times: ours (``echomq_gevent.protocol.cron``, croniter underneath) against BullMQ
6.7.0's own strategy (its pinned cron-parser), computed side by side.

Each case runs 6 successive next runs from a start instant, the way a scheduler chains
its runs. Start instants sit just before and inside DST changes of several zones. The
differences we keep on purpose (``docs/schedulers.md``) are tested last.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
from datetime import datetime, timezone
from typing import Any, Dict, List

import pytest

from echomq_gevent.protocol.cron import CronError, next_run
from interop_node import HERE, _node_binary

pytestmark = pytest.mark.interop

CRON_TOOL = os.path.join(HERE, "node", "cron_next.js")
#: The zone of both processes for patterns without ``tz`` (Node uses its local zone).
LOCAL_TZ = "America/Chicago"

PATTERNS = [
    # 5 fields, ranges, steps, lists, names
    "*/5 * * * *", "0 9 * * 1-5", "30 2 * * *", "15 1 * * *", "0 */2 * * *", "5-10/2 3 * * *",
    "0 1-3 * * *", "30 1,2,3 * * *", "*/7 * * * *", "0 0 1,15 * *", "0 0 * JAN,JUL *", "0 8 * * MON-FRI",
    "0 0 * * mon,wed", "0 0 1 */3 *", "15,45 */6 1,15 * *", "0 0 29 2 *", "59 23 31 12 *",
    # day of month and day of week together (either matches), 7 and 0 both Sunday, ?
    "0 0 13 * 5", "0 0 */2 * 1", "0 0 1-10/3 * 1", "0 9 1-7 * 1", "0 0 * * 7", "0 0 * * 0", "0 0 ? * 1",
    "0 0 * * 1-7/2",
    # L and #
    "0 0 L * *", "0 0 L 2 *", "0 12 * * 5L", "0 0 ? * FRIL", "0 10 * * 1#2", "0 0 12 ? * 2#1",
    "0 0 L * 5",
    # 6 fields (seconds first) and aliases
    "0 30 2 * * *", "*/20 * * * * *", "*/45 * * * * *", "@daily", "@hourly", "@weekdays", "@monthly",
]
ZONES = [None, "UTC", "America/New_York", "Europe/Paris", "Australia/Sydney", "Asia/Kolkata"]
STARTS = [
    datetime(2026, 3, 8, 6, 50, tzinfo=timezone.utc),     # just before New York springs forward
    datetime(2026, 3, 29, 0, 30, tzinfo=timezone.utc),    # just before Paris springs forward
    datetime(2026, 10, 25, 0, 0, tzinfo=timezone.utc),    # Paris falls back
    datetime(2026, 11, 1, 5, 0, tzinfo=timezone.utc),     # New York: the hour about to repeat
    datetime(2026, 11, 1, 6, 20, tzinfo=timezone.utc),    # New York: inside the repeated hour
    datetime(2026, 10, 3, 15, 0, tzinfo=timezone.utc),    # Sydney springs forward
    datetime(2026, 4, 4, 15, 40, tzinfo=timezone.utc),    # Sydney: inside the repeated hour
    datetime(2026, 1, 31, 12, 0, 0, 123000, tzinfo=timezone.utc),  # not a whole second
]

BAD_PATTERNS = ["61 * * * *", "0 0 30 2 *", "0 0 31 4 *", "*/0 * * * *", "0 0 LW * *", "0 0 1W * *",
                "* * * * * * *", "0 0 * * 8", "0 0 5-1 * *", "0 12 * * 1#6", "0 0 * * 1-3#2", "not a pattern",
                "0 0 * * FRI-MON", "0 0 * * 5#3,1"]


def _node(cases: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    env = dict(os.environ, TZ=LOCAL_TZ)
    proc = subprocess.run([_node_binary(), CRON_TOOL], input=json.dumps(cases), capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _ours(case: Dict[str, Any]) -> List[int]:
    out: List[int] = []
    millis = case["from"]
    for _ in range(case["count"]):
        nxt = next_run(case["pattern"], millis, case.get("tz"), case.get("startDate"), case.get("endDate"))
        if nxt is None:
            break
        out.append(nxt)
        millis = nxt
    return out


def _show(values: List[int], tz: Any) -> List[str]:
    from zoneinfo import ZoneInfo
    zone = ZoneInfo(tz or LOCAL_TZ)
    return [datetime.fromtimestamp(v / 1000, zone).isoformat() for v in values]


def test_next_runs_match_bullmq(monkeypatch):
    monkeypatch.setenv("TZ", LOCAL_TZ)
    cases = []
    for pattern, tz, start in itertools.product(PATTERNS, ZONES, STARTS):
        cases.append({"pattern": pattern, "tz": tz, "from": int(start.timestamp() * 1000), "count": 6})
    # start and end dates bound the search as in Node
    base = int(datetime(2026, 5, 1, tzinfo=timezone.utc).timestamp() * 1000)
    for pattern in ("0 9 * * *", "*/30 * * * *", "0 0 L * *"):
        cases.append({"pattern": pattern, "tz": "Europe/Paris", "from": base, "count": 6,
                      "startDate": base + 3 * 86400000})
        cases.append({"pattern": pattern, "tz": "America/New_York", "from": base, "count": 6,
                      "endDate": base + 2 * 86400000 + 3600000})
    assert len(cases) >= 50
    theirs = _node(cases)
    mismatches = []
    for case, node_result in zip(cases, theirs):
        assert "error" not in node_result, (case, node_result)
        mine = _ours(case)
        if mine != node_result["next"]:
            mismatches.append(f"{case['pattern']!r} tz={case['tz']} from={_show([case['from']], case['tz'])[0]}: "
                              f"node {_show(node_result['next'], case['tz'])} ours {_show(mine, case['tz'])}")
    assert not mismatches, f"{len(mismatches)} of {len(cases)} cases differ:\n" + "\n".join(mismatches[:20])


def test_patterns_node_refuses_are_refused_here():
    theirs = _node([{"pattern": p, "tz": "UTC", "from": 0, "count": 1} for p in BAD_PATTERNS])
    for pattern, node_result in zip(BAD_PATTERNS, theirs):
        assert "error" in node_result, f"node accepts {pattern!r}: {node_result}"
        with pytest.raises(CronError) as info:
            next_run(pattern, 0, "UTC")
        assert "repeat.pattern" in str(info.value) and repr(pattern) in str(info.value)


@pytest.mark.parametrize("pattern, why", [("H * * * *", "'H'"), ("1 2 3", "3 fields")])
def test_documented_refusals(pattern, why):
    """Node accepts these (a random value per parse; fields padded on the left), we refuse."""
    assert "next" in _node([{"pattern": pattern, "tz": "UTC", "from": 0, "count": 1}])[0]
    with pytest.raises(CronError) as info:
        next_run(pattern, 0, "UTC")
    assert why in str(info.value)

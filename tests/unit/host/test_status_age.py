"""The status table's age column and late schedulers (no Redis: the report is given)."""
from __future__ import annotations

import io

from echomq_gevent.host import status


def test_the_table_shows_the_oldest_ready_job_the_paused_marker_and_late_runs(monkeypatch):
    now = 1_700_000_000_000
    report = {"mail": {"counts": {"waiting": 3}, "paused": True, "workers": [],
                       "age": {"oldest_timestamp": now - 750_000, "job_id": "7", "state": "wait",
                               "paused": True, "age_seconds": 750.0},
                       "schedulers": [{"key": "tick", "every": 60000, "next": now - 90_000, "iterationCount": 4}],
                       "now": now},
              "idle": {"counts": {}, "paused": False, "workers": ["w1"],
                       "age": {"oldest_timestamp": None, "job_id": None, "state": None, "paused": False,
                               "age_seconds": 0.0},
                       "schedulers": [{"key": "soon", "every": 60000, "next": now + 5000}], "now": now}}
    monkeypatch.setattr(status, "status_report", lambda url, names, prefix: report)
    out = io.StringIO()
    status.print_status("redis://x", ["mail", "idle"], "bull", out=out)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("workers  oldest")
    assert lines[1].startswith("mail") and "12m" in lines[1] and lines[1].endswith("(paused)")
    assert lines[2].startswith("idle") and lines[2].rstrip().endswith("-")
    assert "'tick' every 60000 ms" in lines[3] and lines[3].endswith("LATE by 90s")
    assert "LATE" not in lines[4]

"""docs/reliability.md's replay table says what ``scripts.RESEND_SAFE`` does: every script
it calls safe is listed as sent again, none it lists as not sent again is in the set."""
from __future__ import annotations

import os
import re

from echomq_gevent.protocol.scripts import ADD_SCRIPTS, RESEND_SAFE, library

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "docs",
                   "reliability.md")


def replay_rows():
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    section = text.split("## No blind replay", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and "`" in cells[0]:
            rows.append((re.findall(r"`([A-Za-z][A-Za-z0-9]*-\d+)`", cells[0]), cells[1]))
    return rows


def test_the_replay_table_matches_the_code():
    rows = replay_rows()
    assert rows, "docs/reliability.md lost its replay table"
    listed_safe = set()
    for names, outcome in rows:
        assert set(names) <= set(library().sources), f"unknown script in the table: {names}"
        if outcome.startswith("sent again"):
            listed_safe.update(n for n in names if n not in ADD_SCRIPTS)
        else:
            assert "not sent again" in outcome, outcome
            wrongly = [n for n in names if n in RESEND_SAFE]
            assert not wrongly, f"listed as not sent again but safe in the code: {wrongly}"
    assert listed_safe == set(RESEND_SAFE)

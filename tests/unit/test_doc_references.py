"""Comments and docstrings that point into docs/protocol.md name sections it has."""
from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CITE = re.compile(r'docs/protocol\.md,?\s+"([^"]+)"')
OLD_STYLE = re.compile(r"protocol\s+§\s*\d")


def _headings() -> set:
    with open(os.path.join(ROOT, "docs", "protocol.md"), encoding="utf-8") as fh:
        return {re.sub(r"^#+\s*", "", line).strip() for line in fh if line.startswith("#")}


def _sources():
    for top in ("echomq_gevent", "lua", "tests"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "__pycache__")]
            for f in files:
                if f.endswith((".py", ".lua")) and f != os.path.basename(__file__):
                    yield os.path.join(folder, f)


def test_citations_name_existing_sections():
    headings = _headings()
    cited = 0
    for path in _sources():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        assert not OLD_STYLE.search(text), f"{path}: cite docs/protocol.md by section name, not by number"
        for name in CITE.findall(text):
            cited += 1
            assert name in headings, f'{path}: docs/protocol.md has no section "{name}"'
    assert cited > 10  # the scan found the citations

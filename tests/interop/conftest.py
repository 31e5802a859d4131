"""Fixtures for the Node interop tests; every test collected below this folder is marked
``interop`` (``-m "not interop"`` leaves them out)."""
from __future__ import annotations

import os

import pytest

from interop_node import NodeTool

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_report_header(config):
    """Which Node bullmq the interop tests run against (``$ECHOMQ_NODE_BULLMQ``)."""
    import json

    from interop_node import BULLMQ_DIR, NODE_BULLMQ

    try:
        with open(os.path.join(BULLMQ_DIR, "package.json"), encoding="utf-8") as fh:
            version = json.load(fh).get("version", "?")
    except OSError:
        version = "not installed"
    return f"Node bullmq: {version} (node_modules/{NODE_BULLMQ})"


def pytest_collection_modifyitems(config, items):
    """Mark every test of this folder ``interop`` so ``-m "not interop"`` leaves them out."""
    for item in items:
        if str(item.fspath).startswith(HERE + os.sep):
            item.add_marker(pytest.mark.interop)


@pytest.fixture
def node(redis_url, prefix, qname):
    """A :class:`NodeTool` for this test's queue; its processes are stopped afterwards."""
    tool = NodeTool(redis_url, prefix, qname)
    try:
        yield tool
    finally:
        tool.close()

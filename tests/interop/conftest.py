"""Fixtures for the Node interop tests; every test collected below this folder is marked
``interop`` (``-m "not interop"`` leaves them out)."""
from __future__ import annotations

import os

import pytest

from interop_node import NodeTool

HERE = os.path.dirname(os.path.abspath(__file__))


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

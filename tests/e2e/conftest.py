"""Fixtures of the end-to-end tests (whole processes: the command, gunicorn, a worker)."""
from __future__ import annotations

import os

import pytest


def redis_pids_in(directory: str) -> list:
    """pids of redis-server processes whose command line names ``directory``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if argv and b"redis-server" in argv[0] and directory.encode() in b" ".join(argv):
            pids.append(int(entry))
    return pids


@pytest.fixture(name="redis_pids_in")
def redis_pids_in_fixture():
    """:func:`redis_pids_in` as a fixture."""
    return redis_pids_in

"""Helpers of the framework integration tests: a subprocess runner for the example
projects' commands."""
from __future__ import annotations

import os
from typing import Dict, List

import pytest

from running_command import RunningCommand

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Command(RunningCommand):
    """A running command (a framework's worker command) with its output collected; the
    checkout and ``cwd`` are on its ``PYTHONPATH``."""

    def __init__(self, argv: List[str], cwd: str, env: Dict[str, str]) -> None:
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, cwd, full_env.get("PYTHONPATH", "")) if p)
        full_env.update(env)
        super().__init__(argv, cwd, full_env)


@pytest.fixture
def command():
    """Start commands with ``command(argv, cwd, env)``; any still running is killed at the end."""
    started: List[Command] = []

    def start(argv: List[str], cwd: str, env: Dict[str, str]) -> Command:
        c = Command(argv, cwd, env)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()

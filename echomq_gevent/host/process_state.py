"""The supervisor's state file: which worker processes run for a configuration file.

The supervisor (:mod:`echomq_gevent.host.supervisor`) rewrites it whenever a child
starts, reports or exits, and removes it when it exits; ``echomq-gevent -c FILE
status`` reads it to show each process (pid, queues, jobs done, RSS, started at). It
lives in ``$ECHOMQ_RUN_DIR`` (else the temporary directory), named after the absolute
path of the configuration file, so it is found on the same host, by the same path. No
gevent and no Redis here: the status command imports it as it is.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Dict, Optional

__all__ = ["state_path", "write_state", "read_state", "RUN_DIR_ENV"]

#: Environment variable naming the folder of the state files (default: the temporary directory).
RUN_DIR_ENV = "ECHOMQ_RUN_DIR"


def state_path(config_filename: str) -> str:
    """The state file of the supervisor of ``config_filename`` (any spelling of one path
    gives the same file)."""
    digest = hashlib.sha1(os.path.realpath(config_filename).encode()).hexdigest()[:16]
    folder = os.environ.get(RUN_DIR_ENV) or tempfile.gettempdir()
    return os.path.join(folder, f"echomq-gevent-{digest}.json")


def write_state(path: str, state: Dict[str, Any]) -> None:
    """Replace the file at ``path`` with ``state`` as JSON (write then rename, so a reader
    never sees half a file). Errors are the caller's to log."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # runs as another user
        return True
    return True


def read_state(config_filename: str) -> Optional[Dict[str, Any]]:
    """The state the supervisor of ``config_filename`` last wrote, or None when there is
    none, it cannot be read, or its supervisor no longer runs. Checked for shape: only
    ``supervisor`` (a dict with an int ``pid``) and ``processes`` (a list of dicts) pass."""
    try:
        with open(state_path(config_filename), encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("supervisor"), dict):
        return None
    processes = state.get("processes")
    if not isinstance(processes, list) or not all(isinstance(p, dict) for p in processes):
        return None
    if not _alive(state["supervisor"].get("pid")):
        return None
    return state

"""The supervisor's state file: which worker processes run for a configuration file.

The supervisor (:mod:`echomq_gevent.host.supervisor`) rewrites it whenever a child
starts, reports or exits, and removes it when it exits; ``echomq-gevent -c FILE
status`` reads it to show each process (pid, queues, jobs done, RSS, started at). It
lives in ``$ECHOMQ_RUN_DIR`` (else the temporary directory), named after the real path
of the configuration file and the supervisor's pid, so it is found on the same host, by
the same file, and two supervisors of one file each have their own. A file whose
supervisor is gone (killed) is skipped by readers and removed by the next supervisor of
that file. No gevent and no Redis here: the status command imports it as it is.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["state_path", "write_state", "read_states", "remove_stale", "RUN_DIR_ENV"]

#: Environment variable naming the folder of the state files (default: the temporary directory).
RUN_DIR_ENV = "ECHOMQ_RUN_DIR"


def _stem(config_filename: str) -> str:
    digest = hashlib.sha1(os.path.realpath(config_filename).encode()).hexdigest()[:16]
    folder = os.environ.get(RUN_DIR_ENV) or tempfile.gettempdir()
    return os.path.join(folder, f"echomq-gevent-{digest}")


def state_path(config_filename: str, pid: Optional[int] = None) -> str:
    """The state file of the supervisor ``pid`` (default: this process) of
    ``config_filename`` (any spelling of one path gives the same file)."""
    return f"{_stem(config_filename)}-{pid or os.getpid()}.json"


def write_state(path: str, state: Dict[str, Any]) -> None:
    """Replace the file at ``path`` with ``state`` as JSON (write then rename, so a reader
    never sees half a file). Errors are the caller's to log."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def _alive(pid: Any) -> bool:
    """True when ``pid`` runs and, where ``/proc`` tells, runs our command (not a process
    that took the pid of a supervisor killed long ago)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # runs as another user
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"echomq" in fh.read()
    except OSError:
        return True


def _files(config_filename: str) -> List[Tuple[int, str]]:
    out = []
    for path in glob.glob(f"{glob.escape(_stem(config_filename))}-*.json"):
        pid = path.rsplit("-", 1)[1][:-len(".json")]
        if pid.isdigit():
            out.append((int(pid), path))
    return sorted(out)


def read_states(config_filename: str) -> List[Dict[str, Any]]:
    """What each running supervisor of ``config_filename`` last wrote (oldest pid first);
    files that cannot be read, are not of the expected shape, or whose supervisor no
    longer runs are skipped. Only ``supervisor`` (a dict whose ``pid`` is the file's) and
    ``processes`` (a list of dicts) pass."""
    states = []
    for pid, path in _files(config_filename):
        try:
            with open(path, encoding="utf-8") as fh:
                state = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(state, dict) or not isinstance(state.get("supervisor"), dict):
            continue
        processes = state.get("processes")
        if not isinstance(processes, list) or not all(isinstance(p, dict) for p in processes):
            continue
        if state["supervisor"].get("pid") != pid or not _alive(pid):
            continue
        states.append(state)
    return states


def remove_stale(config_filename: str) -> None:
    """Remove the state files of supervisors of ``config_filename`` that no longer run
    (called by a supervisor as it starts)."""
    for pid, path in _files(config_filename):
        if pid != os.getpid() and not _alive(pid):
            try:
                os.remove(path)
            except OSError:
                pass

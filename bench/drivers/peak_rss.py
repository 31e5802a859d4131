"""The peak RSS a producer driver reports: this process's own (``VmHWM``).

``getrusage``'s ``ru_maxrss`` is not used where ``/proc`` exists: on Linux a process
started by ``fork``/``vfork`` and ``exec`` inherits in it the resident size of the parent at
the spawn (here the harness, about 45 MB), so a producer smaller than the harness would
report the harness's size.
"""
from __future__ import annotations

import resource


def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

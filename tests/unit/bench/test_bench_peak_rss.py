"""The producers' peak RSS is their own, not the harness's that spawned them."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

DRIVERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       "bench", "drivers")
CHILD = ("import resource, sys; sys.path.insert(0, sys.argv[1]); from peak_rss import peak_rss_mb; "
         "print(peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux's")
def test_a_child_of_a_large_parent_reports_its_own_peak():
    big = bytearray(200 * 1024 * 1024)
    for i in range(0, len(big), 4096):  # resident, not just reserved
        big[i] = 1
    out = subprocess.run([sys.executable, "-c", CHILD, DRIVERS], capture_output=True, text=True,
                         check=True).stdout.split()
    del big
    own, inherited = float(out[0]), float(out[1])
    assert inherited > 200  # what ru_maxrss says: the parent's size at the spawn
    assert own < 100, f"the child's own peak is {own:.0f} MB"

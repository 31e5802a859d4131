"""Native threads (the lock renewal, the cancellation subscriber, the hub watchdog) are
waited for at exit, briefly: a thread still running Python while the interpreter is
taken down can crash the process on its way out (exit status -11)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from echomq_gevent.connection import blocking


def _thread_for(seconds: float):
    """A native thread that runs ``seconds`` unless its gate (returned) is released."""
    gate = blocking.native_lock()
    gate.acquire()
    blocking.start_native_thread(lambda: gate.acquire(True, seconds))
    return gate


def test_the_wait_returns_once_the_threads_ended():
    _thread_for(0.3)
    started = time.monotonic()
    assert blocking.wait_native_threads(5.0) == 0
    assert 0.2 <= time.monotonic() - started < 4.0


def test_the_wait_gives_up_after_its_timeout():
    gate = _thread_for(2.0)
    started = time.monotonic()
    assert blocking.wait_native_threads(0.1) == 1
    assert time.monotonic() - started < 1.5
    gate.release()
    assert blocking.wait_native_threads(5.0) == 0


def test_a_process_waits_at_exit_for_a_thread_told_to_stop(tmp_path):
    """The thread writes a file after the main thread returned: it ran to its end."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    code = textwrap.dedent("""
        import sys, time
        from echomq_gevent.connection.blocking import native_lock, start_native_thread
        gate = native_lock(); gate.acquire()
        def work():
            gate.acquire(True, 0.3)
            open(sys.argv[1], "w").write("ended")
        start_native_thread(work)
    """)
    out = str(tmp_path / "ended")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code, out], env=env, timeout=60)
    assert done.returncode == 0
    assert (tmp_path / "ended").read_text() == "ended"

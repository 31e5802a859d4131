"""Worker and producer drivers the benchmark harness runs as subprocesses.

Every worker driver takes one JSON argument ``{url, queue, prefix, concurrency, mode,
sleep_ms, report}`` (the ours and node drivers also ``metrics``: maxDataPoints), prints ``READY`` once connected, and on SIGTERM closes gracefully,
writes ``{processed, latencies_ms}`` to ``report`` and exits 0. Producer drivers take
``{url, queue, prefix, mode: add|bulk, n, chunk}``, print ``READY`` after warming up, wait for
``GO`` on stdin, then print ``{n, elapsed_s, cpu_s, maxrss_mb}`` (CPU of the timed part, the process's own peak RSS: ``VmHWM``, see ``peak_rss.py``)
as one JSON line and exit.
"""

"""Side-by-side benchmarks of echomq-gevent, BullMQ (Node) and bullmq (Python).

Run ``python -m bench.run`` (or ``make bench``); ``--quick`` for a sub-minute smoke run.
See ``docs/performance.md``.
"""

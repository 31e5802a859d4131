"""The scale section of the bench (``python -m bench.run --only scale``): how the cost of our
worker and of BullMQ (Node) 6.7.0 grows with the work, side by side in one run.

Cases (issue 30; each for every implementation asked, one round each, same Redis; pick them
with ``--scale-cases``):

- **backlog**: N waiting no-op jobs (default 1e3, 1e5, 1e6) at concurrency 100 through
  :meth:`bench.harness.Bench.run_worker` with the queue filled by ``scale_fill.lua``
  (straight into Redis, in the shape an add leaves; not timed) instead of Node's
  ``addBulk``: jobs/s, worker and Redis CPU per job, and Redis memory per waiting job
  (``used_memory`` delta over the fill / N; the same for every worker, it is what lands).
- **admin**: on a queue of N jobs (default 1e5): ``get_job_counts``, three ``get_jobs``
  pages of 100 (head, middle, tail of the completed set), ``clean`` of every completed job,
  ``retry_jobs`` of every failed job, ``drain`` and ``obliterate`` of N waiting jobs, each
  timed by the driver (``scale_admin_*``), with the longest Redis command during it read from
  ``SLOWLOG`` (every command of 1 ms or more is logged).
- **delayed**: N delayed jobs (default 1e5) due over S seconds (default 60) and an idle
  worker at concurrency 100 that records when each starts: lateness p50/p99/max of the
  start against the due time written in the job.
- **idle queues**: one worker process on Q queues (default 200) with nothing to do:
  connections to Redis (``CLIENT LIST``), the process's CPU over 10 s, its RSS, and pick-up
  latency of jobs added one at a time to one of the queues; ours twice, with a marker wait
  per queue and with one shared wait (``marker_wait: shared``, the row ``ours shared wait``).
- **busy queues** (only when asked: ``--scale-cases busy``): one worker process on 20 queues
  of 5,000 waiting no-op jobs each, all resumed at once: jobs/s, CPU per job and connections
  while busy; ours with each worker's own client, one shared client, and the shared wait.
- **prioritized**: N waiting no-op jobs (default 1e5) over P priorities (default 1,000),
  filled in the shape ``addPrioritizedJob`` leaves (ZSET score priority·2^32 + ``pc``), at
  concurrency 100: jobs/s, CPU per job, and the start order the worker records (jobs started
  behind a job of a higher priority number by more than the 100 in flight).
- **schedulers**: an idle worker at concurrency 100, then N job schedulers (default 1e4; half
  ``every``, half cron, the cron runs spread evenly over the window's seconds: 83 a second,
  fewer than the concurrency) upserted with each implementation's API, over a window (default
  60 s): lateness of each run against its scheduled time (the ``millis`` of its id), the
  worker's and Redis's CPU. Then a **burst**: 1,250 cron schedulers over 10 s, 125 runs due
  in the same millisecond each second, more than the concurrency: apart for the runs that
  found a free slot and those that waited for one.
- **payloads**: no-op jobs carrying 100 KB (default 2,000 jobs) and 1 MB (300) of data at
  concurrency 100: jobs/s and the worker's peak RSS.
- **dashboard** (ours; a client-call reference for both): our dashboard on a queue of N
  waiting jobs (default 1e6), served in its own process, timed by real HTTP GETs of the
  queues page and the job list's first and last pages.

Writes ``scale.md`` and ``scale.json`` into ``--out``; a full run appends one row to
``history.md``.

The modules, one concern each: :mod:`.section` (the sizes and the run of every case),
:mod:`.backlogs` (backlog, prioritized, payloads), :mod:`.admin` (admin calls, dashboard),
:mod:`.lateness` (delayed, schedulers), :mod:`.queues` (idle and busy queues),
:mod:`.tools` (the fill and the drivers they share) and :mod:`.report` (``scale.md``, the
history rows). Their public names import from here as well.
"""
from __future__ import annotations

from .admin import LONGEST_TARGET_MS, SLOWLOG_US, measure_admin, measure_dashboard
from .backlogs import SHORT_BACKLOG, measure_backlog, measure_payload, measure_prioritized, out_of_order
from .lateness import measure_delayed, measure_schedulers, scheduler_specs, slot_split
from .queues import BUSY_VARIANTS, measure_busy, measure_idle
from .report import history_row, markdown
from .section import median_rounds, run_scale, sizes
from .tools import FILL_CHUNK, Filler

__all__ = [
    "BUSY_VARIANTS", "FILL_CHUNK", "LONGEST_TARGET_MS", "SHORT_BACKLOG", "SLOWLOG_US", "Filler", "history_row",
    "markdown", "measure_admin", "measure_backlog", "measure_busy", "measure_dashboard", "measure_delayed",
    "measure_idle", "measure_payload", "measure_prioritized", "measure_schedulers", "median_rounds",
    "out_of_order", "run_scale", "scheduler_specs", "sizes", "slot_split",
]

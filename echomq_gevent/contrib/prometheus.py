"""Prometheus metrics for the worker, via ``prometheus_client``.

Load it with ``plugins: [echomq_gevent.contrib.prometheus]`` (``pip install
'echomq-gevent[prometheus]'`` brings ``prometheus_client``). Metrics (labels in braces):

* ``echomq_jobs_completed_total{queue,name}``, ``echomq_jobs_failed_total{queue,name}``,
  ``echomq_jobs_retried_total{queue,name}``: counters;
* ``echomq_jobs_stalled_total{queue}``, ``echomq_jobs_lock_lost_total{queue}``,
  ``echomq_jobs_handed_back_total{queue}``: counters;
* ``echomq_job_duration_seconds{queue,name}``: histogram of processor run time of
  completed jobs;
* ``echomq_jobs_in_flight{queue}``: gauge of jobs running now;
* ``echomq_queue_jobs{queue,state}``, ``echomq_queue_ready_jobs{queue}``,
  ``echomq_queue_oldest_age_seconds{queue}``, ``echomq_queue_paused{queue}``,
  ``echomq_scheduler_overdue_seconds{queue,scheduler}``: the queues' own numbers, read
  from Redis at each scrape by the one process that serves it
  (:mod:`echomq_gevent.host.queue_gauges`);
* ``echomq_outbox_waiting{app}``, ``echomq_outbox_oldest_age_seconds{app}``,
  ``echomq_outbox_parked{app}``: gauges of each transactional outbox this process
  relays (``echomq_gevent.contrib.outbox``), set each time its relay reads them (about
  once a second); the largest value of the live processes.

Several processes (gunicorn workers): set ``PROMETHEUS_MULTIPROC_DIR`` to an empty,
writable folder *before* the processes start (prometheus_client reads it at import);
each process then writes its values to files there and :func:`render` sums them
(the in-flight gauge with ``livesum``, so dead processes drop out; call
:func:`mark_process_dead` from gunicorn's ``child_exit``). Without the variable the
metrics live in the process's default registry.

:func:`render` returns ``(body, content_type)`` for an HTTP endpoint; setting
``ECHOMQ_PROMETHEUS_PORT`` makes the first worker that starts also serve them with
``prometheus_client.start_http_server`` on that port.

Hooks run on the job's greenlet; updating a metric is a dictionary look-up and a
lock, so it never blocks the hub.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Optional, Tuple

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, \
    generate_latest

from echomq_gevent import hookimpl
from echomq_gevent.host.queue_gauges import process_gauges

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

COMPLETED = Counter("echomq_jobs_completed", "Jobs completed", ["queue", "name"])
FAILED = Counter("echomq_jobs_failed", "Jobs failed for good", ["queue", "name"])
RETRIED = Counter("echomq_jobs_retried", "Failed attempts that will be retried", ["queue", "name"])
STALLED = Counter("echomq_jobs_stalled", "Stalled jobs this worker moved back to wait", ["queue"])
LOCK_LOST = Counter("echomq_jobs_lock_lost", "Jobs whose lock this worker lost", ["queue"])
HANDED_BACK = Counter("echomq_jobs_handed_back", "Unfinished jobs handed back at shutdown", ["queue"])
DURATION = Histogram("echomq_job_duration_seconds", "Processor run time of completed jobs", ["queue", "name"],
                     buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300))
IN_FLIGHT = Gauge("echomq_jobs_in_flight", "Jobs running now", ["queue"], multiprocess_mode="livesum")
#: How the outbox gauges of several processes combine: the largest value of the live ones
#: (every relay of an app reads the same table); prometheus_client before 0.15 has no
#: ``livemax`` and gives one series per live process instead (a ``pid`` label).
OUTBOX_MODE = "livemax" if "livemax" in getattr(Gauge, "_MULTIPROC_MODES", ()) else "liveall"
OUTBOX_WAITING = Gauge("echomq_outbox_waiting", "Outbox rows committed and not yet added to Redis", ["app"],
                       multiprocess_mode=OUTBOX_MODE)
OUTBOX_AGE = Gauge("echomq_outbox_oldest_age_seconds", "Age of the oldest waiting outbox row", ["app"],
                   multiprocess_mode=OUTBOX_MODE)
OUTBOX_PARKED = Gauge("echomq_outbox_parked", "Outbox rows parked with a reason (never added)", ["app"],
                      multiprocess_mode=OUTBOX_MODE)

_server_lock = threading.Lock()
_server_started = False
#: (queue, job id) of the jobs counted in IN_FLIGHT, so each is counted down exactly once
#: whichever event ends it.
_running: set = set()


def _started(job: Any) -> None:
    key = (_queue(job), getattr(job, "id", None))
    if key not in _running:
        _running.add(key)
        IN_FLIGHT.labels(key[0]).inc()


def _ended(job: Any) -> None:
    key = (_queue(job), getattr(job, "id", None))
    if key in _running:
        _running.discard(key)
        IN_FLIGHT.labels(key[0]).dec()


def render(registry: Optional[CollectorRegistry] = None) -> Tuple[bytes, str]:
    """The metrics in Prometheus text format and its content type.

    In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set) the values of every process
    writing to that folder are summed; else the default registry (or ``registry``) is used.
    Safe to call from any greenlet or thread.
    """
    if registry is None and os.environ.get(MULTIPROC_ENV):
        registry = _multiprocess_registry()
    elif registry is None and process_gauges().queues:
        process_gauges().register_on(REGISTRY)
    return generate_latest(registry or REGISTRY), CONTENT_TYPE_LATEST


def _multiprocess_registry() -> CollectorRegistry:
    """A registry of every process's metric files, and the queues' gauges this process
    watches (read from Redis when it is collected)."""
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    if process_gauges().queues:
        registry.register(process_gauges())
    return registry


def mark_process_dead(pid: int) -> None:
    """Drop a dead process's live gauges (call from gunicorn's ``child_exit``)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def _outbox_stats(label: str, stats: Any) -> None:
    """A relay read its outbox's numbers (relay greenlet)."""
    if stats.get("waiting") is None:
        return  # the database could not be read: keep the last values
    OUTBOX_WAITING.labels(label).set(stats["waiting"])
    OUTBOX_AGE.labels(label).set(stats.get("oldest_age_s") or 0)
    OUTBOX_PARKED.labels(label).set(stats.get("parked") or 0)


def _listen_to_outboxes() -> None:
    from .outbox.relay import STATS_LISTENERS

    if _outbox_stats not in STATS_LISTENERS:
        STATS_LISTENERS.append(_outbox_stats)


_listen_to_outboxes()


def _queue(job: Any) -> str:
    return str(getattr(job, "queue_name", "") or "")


@hookimpl
def echomq_worker_started(worker: Any) -> None:
    global _server_started
    gauges = process_gauges()
    keys, client = getattr(worker, "keys", None), getattr(worker, "client", None)
    if keys is not None and client is not None:
        gauges.watch(client, keys)  # read only where this process serves the metrics
    port = os.environ.get("ECHOMQ_PROMETHEUS_PORT")
    if not port:
        return
    with _server_lock:
        if _server_started:
            return
        from prometheus_client import start_http_server

        gauges.register_on(REGISTRY)
        start_http_server(int(port))
        _server_started = True


@hookimpl
def echomq_job_active(worker: Any, job: Any) -> None:
    _started(job)


@hookimpl
def echomq_job_completed(worker: Any, job: Any, result: Any, duration_ms: float) -> None:
    q = _queue(job)
    _ended(job)
    COMPLETED.labels(q, job.name).inc()
    DURATION.labels(q, job.name).observe(max(duration_ms, 0.0) / 1000.0)


@hookimpl
def echomq_job_failed(worker: Any, job: Any, error: BaseException) -> None:
    q = _queue(job)
    _ended(job)
    FAILED.labels(q, job.name).inc()


@hookimpl
def echomq_job_retried(worker: Any, job: Any, error: BaseException, delay_ms: int) -> None:
    q = _queue(job)
    _ended(job)
    RETRIED.labels(q, job.name).inc()


@hookimpl
def echomq_job_stalled(worker: Any, queue: str, job_id: str) -> None:
    STALLED.labels(queue).inc()


@hookimpl
def echomq_job_lock_lost(worker: Any, job: Any) -> None:
    q = _queue(job)
    _ended(job)
    LOCK_LOST.labels(q).inc()


@hookimpl
def echomq_job_moved(worker: Any, job: Any, state: str, error: BaseException) -> None:
    _ended(job)


@hookimpl
def echomq_job_handed_back(worker: Any, job: Any) -> None:
    q = _queue(job)
    _ended(job)
    HANDED_BACK.labels(q).inc()

"""The producer and admin side of a queue: add jobs, read them back, pause, clean up.

``Queue`` speaks BullMQ v6's protocol, so jobs it adds are taken by Node BullMQ
workers as well as ours, and what Node producers add reads back here. One instance
per process may be shared by every greenlet (the redis-py client is thread and
greenlet safe; give ``max_connections`` when many request greenlets enqueue at once).
Every method is a blocking call that yields to other greenlets while it waits on
Redis once gevent has patched the socket module.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..protocol.clock import now_ms
from ..connection.cluster import is_cluster
from ..connection.clients import DEFAULT_URL, ConnectionLike, ConnectionSettings, close_client, make_client
from ..errors import InvalidOptionError, ScriptError, error_for_code
from .job import Job
from ..protocol.options import decode_job_options, encode_job_data, encode_job_options, validate_job_options
from ..protocol.keys import DEFAULT_PREFIX, QueueKeys
from .admin import CLEAN_TYPES, QueueAdmin
from .forward import forward
from .getters import DEFAULT_COUNT_TYPES, JOB_TYPES, QueueGetters, events_max_len
from .schedulers import QueueSchedulers
from ..protocol.scripts import Scripts

__all__ = ["Queue", "JOB_TYPES", "DEFAULT_COUNT_TYPES", "CLEAN_TYPES"]

_ADD_SCRIPTS = ("addStandardJob-9", "addDelayedJob-6", "addPrioritizedJob-9")

JobSpec = Union[Tuple[str, Any], Tuple[str, Any, Optional[Mapping[str, Any]]], Mapping[str, Any]]


class _PreparedJob:
    """A validated, encoded job ready for an add script (built before anything is written)."""

    __slots__ = ("name", "data", "data_json", "opts", "encoded", "job_id", "timestamp", "script_kwargs")

    def __init__(self, name: str, data: Any, data_json: str, opts: Dict[str, Any],
                 encoded: Dict[str, Any], job_id: str, timestamp: int,
                 script_kwargs: Dict[str, Any]) -> None:
        self.name = name
        self.data = data
        self.data_json = data_json
        self.opts = opts
        self.encoded = encoded
        self.job_id = job_id
        self.timestamp = timestamp
        self.script_kwargs = script_kwargs


class Queue:
    """A BullMQ queue (``Queue("mail")`` uses keys ``bull:mail:*``).

    ``connection`` is a Redis URL or a ``redis.Redis`` instance (a client that does not
    decode responses is cloned into one that does). ``default_job_options`` are merged
    under each job's own options, like Node's ``defaultJobOptions``. ``streams``
    (``{"events": {"maxLen": N}}``, Node's option) stores the events stream's cap in
    meta at once (see :meth:`set_events_max_len`); without it the cap stays as stored
    (10 000 when none is). ``connection_settings``
    (:class:`~echomq_gevent.connection.clients.ConnectionSettings`: socket timeouts, TCP
    keep-alive, health checks) apply to a client built from a URL; the defaults are used
    without it. ``plugins`` (a :class:`~echomq_gevent.plugins.PluginHost`) runs every
    :meth:`add` through the plugins' ``echomq_add_job`` hook (producer-side tracing).

    Adding jobs is the queue's own; its other methods are carried out by three parts it
    holds, each made with the queue's keys, client and scripts: :attr:`getters`
    (:class:`~echomq_gevent.queue.getters.QueueGetters`: jobs, states, counts, metrics),
    :attr:`admin` (:class:`~echomq_gevent.queue.admin.QueueAdmin`: pause, clean, retry,
    limits) and :attr:`schedulers` (:class:`~echomq_gevent.queue.schedulers.QueueSchedulers`).
    """

    def __init__(self, name: str, connection: ConnectionLike = DEFAULT_URL, prefix: str = DEFAULT_PREFIX,
                 max_connections: Optional[int] = None,
                 default_job_options: Optional[Mapping[str, Any]] = None,
                 streams: Optional[Mapping[str, Any]] = None,
                 connection_settings: Optional[ConnectionSettings] = None, plugins: Any = None) -> None:
        self.keys = QueueKeys(name, prefix)
        self.name = self.keys.name
        self.prefix = self.keys.prefix
        self.qualified_name = self.keys.queue_key
        self.client = make_client(connection, max_connections=max_connections, settings=connection_settings)
        self._owns_client = self.client is not connection
        self.scripts = Scripts(self.client, self.keys)
        self.default_job_options = validate_job_options(default_job_options, None)
        self.getters = QueueGetters(self.keys, self.client, self.scripts)
        self.admin = QueueAdmin(self.keys, self.client, self.scripts)
        self.schedulers = QueueSchedulers(self.keys, self.client, self.scripts, self.getters,
                                          self.default_job_options)
        self._add_scripts_loaded = False
        #: A :class:`~echomq_gevent.plugins.PluginHost` whose ``echomq_add_job`` wrappers run
        #: around :meth:`add` (e.g. ``echomq_gevent.contrib.otel``); ``None``: plain adds.
        self.plugins = plugins
        if streams is not None:
            self.set_events_max_len(events_max_len(streams))

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, prefix={self.prefix!r})"

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Release the connections this queue opened (a client passed in stays open)."""
        self.scripts.release_connections()
        if self._owns_client:
            close_client(self.client)

    # -- adding jobs ------------------------------------------------------------------
    def prepare_job(self, name: Any, data: Any, opts: Optional[Mapping[str, Any]]) -> _PreparedJob:
        """Validate and encode one job for an add script (nothing is written). Used by
        ``add``, ``add_bulk`` and the FlowProducer; raises EchoMQError/InvalidOptionError/
        InvalidJobIdError/InvalidJobDataError naming the job and what is wrong."""
        if not isinstance(name, str):
            raise InvalidOptionError(f"job name must be a string, got {name!r}")
        clean = validate_job_options(opts, name)
        if "repeat" in clean:
            raise InvalidOptionError(
                f"job option 'repeat' (job {name!r}): BullMQ 6 does not repeat jobs added with opts.repeat; "
                f"create a job scheduler instead: queue.upsert_job_scheduler(scheduler_id, repeat, "
                f"{{'name': {name!r}, 'data': ..., 'opts': ...}})")
        if self.default_job_options:
            # as Node: defaults under the job's own options, never a default jobId
            merged = {k: v for k, v in self.default_job_options.items() if k != "jobId"}
            merged.update(clean)
            clean = validate_job_options(merged, name)
        data_json = encode_job_data(data, name, clean.get("sizeLimit"))
        timestamp = clean.get("timestamp") or now_ms()
        encoded = encode_job_options(clean)
        kwargs: Dict[str, Any] = {}
        parent = clean.get("parent")
        if parent:
            parent_prefix, parent_queue = parent["queue"].rsplit(":", 1)
            parent_keys = QueueKeys(parent_queue, parent_prefix)
            parent_map: Dict[str, Any] = {"id": parent["id"], "queueKey": parent["queue"]}
            for long_name, short in (("failParentOnFailure", "fpof"), ("removeDependencyOnFailure", "rdof"),
                                     ("ignoreDependencyOnFailure", "idof"), ("continueParentOnFailure", "cpof")):
                if clean.get(long_name):
                    parent_map[short] = True
            kwargs["parent_key"] = parent_keys.job(parent["id"])
            kwargs["parent_deps_key"] = parent_keys.dependencies(parent["id"])
            kwargs["parent"] = parent_map
        if clean.get("repeatJobKey"):
            kwargs["repeat_job_key"] = clean["repeatJobKey"]
        dedup = clean.get("deduplication")
        if dedup:
            kwargs["dedup_key"] = self.keys.dedup(dedup["id"])
        return _PreparedJob(name, data, data_json, clean, encoded, clean.get("jobId", ""), timestamp, kwargs)

    def job_from_prepared(self, prepared: _PreparedJob, job_id: str) -> Job:
        """The Job an add of ``prepared`` created, as stored under ``job_id``."""
        job = Job(self.scripts, job_id, prepared.name, prepared.data,
                  decode_job_options(prepared.encoded), prepared.timestamp)
        kw = prepared.script_kwargs
        if "parent_key" in kw:
            job.parent_key = kw["parent_key"]
            job.parent = dict(kw["parent"])
        job.repeat_job_key = kw.get("repeat_job_key")
        dedup = prepared.opts.get("deduplication")
        job.deduplication_id = dedup["id"] if dedup else None
        return job

    def add(self, name: str, data: Any, opts: Optional[Mapping[str, Any]] = None) -> Job:
        """Add one job; returns it as stored.

        ``opts`` uses BullMQ's option names (see :mod:`echomq_gevent.protocol.options`).
        For an existing custom ``jobId`` nothing is written and the existing id comes
        back (a ``duplicated`` event is emitted); a deduplicated add returns the id of
        the job that owns the deduplication id. Raises InvalidOptionError /
        InvalidJobIdError / InvalidJobDataError before writing anything,
        ParentJobNotExist when ``opts.parent`` names a missing job. With ``plugins``
        the add goes through their ``echomq_add_job`` hook.
        """
        if self.plugins is not None:
            return self.plugins.add_job(self, name, data, opts, self._add)
        return self._add(name, data, opts)

    def _add(self, name: str, data: Any, opts: Optional[Mapping[str, Any]] = None) -> Job:
        prepared = self.prepare_job(name, data, opts)
        try:
            job_id = self.scripts.add_job(prepared.job_id, prepared.name, prepared.timestamp,
                                          prepared.data_json, prepared.encoded, **prepared.script_kwargs)
        except ScriptError as exc:
            raise self._explain(exc, prepared) from None
        return self.job_from_prepared(prepared, str(job_id))

    @staticmethod
    def _explain(exc: ScriptError, prepared: _PreparedJob) -> ScriptError:
        """The same error, with the job name and the parent key in the message."""
        detail = f"job name {prepared.name!r}"
        parent_key = prepared.script_kwargs.get("parent_key")
        if parent_key:
            detail += f", parent {parent_key!r}"
            if exc.code == -5:
                detail += ": add the parent first (or check opts.parent.queue, '<prefix>:<queue>')"
        err = error_for_code(exc.code, exc.script, exc.job_id, detail)
        return err

    def _ensure_add_scripts(self) -> None:
        if self._add_scripts_loaded or is_cluster(self.client):  # a cluster loads them per node
            return
        pipe = self.client.pipeline(transaction=False)
        for script in _ADD_SCRIPTS:
            pipe.script_load(self.scripts.lib.sources[script])
        pipe.execute()
        self._add_scripts_loaded = True

    def add_bulk(self, jobs: Iterable[JobSpec]) -> List[Job]:
        """Add many jobs in ONE round trip (a pipeline of add scripts); returns them in order.

        Each item is ``(name, data)``, ``(name, data, opts)`` or a mapping with ``name``,
        ``data`` and optional ``opts``. Every job is validated first: one bad job means
        nothing is written. A script error (e.g. a missing parent) is raised after the
        pipeline ran; the jobs before and after it were added. With ``plugins`` the add
        goes through their ``echomq_add_bulk`` hook.
        """
        specs: List[Dict[str, Any]] = []
        for index, spec in enumerate(jobs):
            if isinstance(spec, Mapping):
                name, data, opts = spec.get("name"), spec.get("data"), spec.get("opts")
            else:
                if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
                    raise InvalidOptionError(f"add_bulk item {index} must be (name, data), (name, data, opts) "
                                             f"or {{name, data, opts}}, got {spec!r}")
                name, data = spec[0], spec[1]
                opts = spec[2] if len(spec) == 3 else None
            specs.append({"name": name, "data": data, "opts": opts})
        if self.plugins is not None and specs:
            return self.plugins.add_bulk(self, specs, self._add_bulk)
        return self._add_bulk(specs)

    def _add_bulk(self, specs: List[Dict[str, Any]]) -> List[Job]:
        prepared = [self.prepare_job(s["name"], s["data"], s["opts"]) for s in specs]
        if not prepared:
            return []
        self._ensure_add_scripts()
        batch = self.scripts.batch()
        for p in prepared:
            self.scripts.add_job(p.job_id, p.name, p.timestamp, p.data_json, p.encoded, pipe=batch,
                                 **p.script_kwargs)
        results = batch.execute()
        out: List[Job] = []
        failure: Optional[BaseException] = None
        for p, res in zip(prepared, results):
            if isinstance(res, BaseException):
                failure = failure or res
                continue
            if isinstance(res, int) and res < 0:
                script = self.scripts.add_script_for(p.encoded)[0]
                failure = failure or self._explain(error_for_code(res, script, p.job_id or None), p)
                continue
            out.append(self.job_from_prepared(p, str(res)))
        if failure is not None:
            raise failure
        return out

    # -- reading (QueueGetters) -------------------------------------------------
    get_job = forward("getters", QueueGetters.get_job)
    get_job_state = forward("getters", QueueGetters.get_job_state)
    get_job_counts = forward("getters", QueueGetters.get_job_counts)
    get_job_count_by_types = forward("getters", QueueGetters.get_job_count_by_types)
    count = forward("getters", QueueGetters.count)
    get_job_ids = forward("getters", QueueGetters.get_job_ids)
    get_jobs = forward("getters", QueueGetters.get_jobs)
    get_job_logs = forward("getters", QueueGetters.get_job_logs)
    client_name = forward("getters", QueueGetters.client_name)
    get_workers = forward("getters", QueueGetters.get_workers)
    get_dependencies = forward("getters", QueueGetters.get_dependencies)
    get_metrics = forward("getters", QueueGetters.get_metrics)
    get_deduplication_job_id = forward("getters", QueueGetters.get_deduplication_job_id)
    remove_deduplication_key = forward("getters", QueueGetters.remove_deduplication_key)
    get_global_concurrency = forward("getters", QueueGetters.get_global_concurrency)
    get_global_rate_limit = forward("getters", QueueGetters.get_global_rate_limit)
    remove_rate_limit_key = forward("getters", QueueGetters.remove_rate_limit_key)
    get_rate_limit_ttl = forward("getters", QueueGetters.get_rate_limit_ttl)
    is_maxed = forward("getters", QueueGetters.is_maxed)
    get_counts_per_priority = forward("getters", QueueGetters.get_counts_per_priority)
    get_workers_count = forward("getters", QueueGetters.get_workers_count)
    get_oldest_job_timestamp = forward("getters", QueueGetters.get_oldest_job_timestamp)
    get_queue_age = forward("getters", QueueGetters.get_queue_age)
    trim_events = forward("getters", QueueGetters.trim_events)
    set_events_max_len = forward("getters", QueueGetters.set_events_max_len)
    remove_orphaned_jobs = forward("getters", QueueGetters.remove_orphaned_jobs)
    export_prometheus_metrics = forward("getters", QueueGetters.export_prometheus_metrics)
    get_waiting_count = forward("getters", QueueGetters.get_waiting_count)
    get_waiting_children_count = forward("getters", QueueGetters.get_waiting_children_count)
    get_active_count = forward("getters", QueueGetters.get_active_count)
    get_delayed_count = forward("getters", QueueGetters.get_delayed_count)
    get_prioritized_count = forward("getters", QueueGetters.get_prioritized_count)
    get_completed_count = forward("getters", QueueGetters.get_completed_count)
    get_failed_count = forward("getters", QueueGetters.get_failed_count)
    get_waiting = forward("getters", QueueGetters.get_waiting)
    get_waiting_children = forward("getters", QueueGetters.get_waiting_children)
    get_active = forward("getters", QueueGetters.get_active)
    get_delayed = forward("getters", QueueGetters.get_delayed)
    get_prioritized = forward("getters", QueueGetters.get_prioritized)
    get_completed = forward("getters", QueueGetters.get_completed)
    get_failed = forward("getters", QueueGetters.get_failed)
    get_version = forward("getters", QueueGetters.get_version)
    update_job_progress = forward("getters", QueueGetters.update_job_progress)
    add_job_log = forward("getters", QueueGetters.add_job_log)

    # -- control and bulk admin (QueueAdmin) ------------------------------------
    pause = forward("admin", QueueAdmin.pause)
    resume = forward("admin", QueueAdmin.resume)
    is_paused = forward("admin", QueueAdmin.is_paused)
    promote_job = forward("admin", QueueAdmin.promote_job)
    cancel_job = forward("admin", QueueAdmin.cancel_job)
    remove_job = forward("admin", QueueAdmin.remove_job)
    drain = forward("admin", QueueAdmin.drain)
    obliterate = forward("admin", QueueAdmin.obliterate)
    clean = forward("admin", QueueAdmin.clean)
    retry_jobs = forward("admin", QueueAdmin.retry_jobs)
    promote_jobs = forward("admin", QueueAdmin.promote_jobs)
    set_global_concurrency = forward("admin", QueueAdmin.set_global_concurrency)
    remove_global_concurrency = forward("admin", QueueAdmin.remove_global_concurrency)
    set_global_rate_limit = forward("admin", QueueAdmin.set_global_rate_limit)
    remove_global_rate_limit = forward("admin", QueueAdmin.remove_global_rate_limit)
    rate_limit = forward("admin", QueueAdmin.rate_limit)
    get_meta = forward("admin", QueueAdmin.get_meta)

    # -- job schedulers (QueueSchedulers) ---------------------------------------
    upsert_job_scheduler = forward("schedulers", QueueSchedulers.upsert_job_scheduler)
    get_job_scheduler = forward("schedulers", QueueSchedulers.get_job_scheduler)
    get_job_schedulers = forward("schedulers", QueueSchedulers.get_job_schedulers)
    get_job_schedulers_count = forward("schedulers", QueueSchedulers.get_job_schedulers_count)
    remove_job_scheduler = forward("schedulers", QueueSchedulers.remove_job_scheduler)

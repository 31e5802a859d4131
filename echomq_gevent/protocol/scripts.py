"""Calling the Lua scripts in ``lua/`` for one queue.

Each file ``lua/<name>-<numkeys>.lua`` is one BullMQ v6 script with the same name,
KEYS and ARGV order as npm ``bullmq`` 6.7.0 (see ``docs/protocol.md``); they are read
and expanded once per process (:mod:`.library`), loaded with SCRIPT LOAD on first
use per server, called with EVALSHA, and reloaded on NOSCRIPT (after a SCRIPT FLUSH or a
server restart). Calls go on the connection :mod:`echomq_gevent.connection.kept` keeps
checked out; on the gevent hub (patched sockets) the calls of all greenlets share one
connection with several round trips in flight (:mod:`echomq_gevent.connection.pipelined`);
every ``Scripts`` of a client shares these connections (:mod:`.lanes`).

:class:`Scripts` wraps every script for one queue: it builds the KEYS from
:class:`~echomq_gevent.protocol.keys.QueueKeys`, packs the msgpack arguments exactly as the
protocol requires, and turns negative return codes into the typed exceptions of
:mod:`echomq_gevent.errors`.
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import redis
from redis.exceptions import NoScriptError, ResponseError

from .admin import AdminScripts
from ..connection.cluster import is_cluster, require_same_slot
from ..connection.routing import ClusterRouter
from ..errors import error_for_code
from .flows import FlowScripts
from .keys import QueueKeys, require_hash_tag
from ..connection.kept import KeptConnection, through_client
from ..connection.pipelined import PipelinedConnection, pipelining_available
from .calls import ADD_SCRIPTS, RESEND_SAFE, ScriptBatch, ScriptCall
from .lanes import ScriptLanes, shared_call
from .lanes import thread_id as _thread_id
from .schedulers import SchedulerScripts
from . import worker_calls
from .worker_calls import FINISH_MANY_MAX
from .library import ScriptLibrary, library, lua_dir, pack

__all__ = ["ScriptLibrary", "Scripts", "shared_call", "ScriptCall", "ScriptBatch", "library", "pack", "lua_dir", "RESEND_SAFE",
           "ADD_SCRIPTS", "FINISH_MANY_MAX"]

Number = Union[int, float]


def _int(v: Any) -> int:
    return int(v) if v is not None else 0


class Scripts:
    """Every script of one queue, callable with Python arguments.

    Used by Queue, Job and Worker, from any greenlet or (with its own client) from a
    native thread: an instance holds no mutable state besides the set of servers its
    scripts are known to be loaded on and the connection it keeps for its calls.

    The worker's per-job calls come in two shapes: a method per script that runs it and
    checks its answer (``move_to_active``, ``move_to_finished``...), and, for calls the
    worker sends together, ``move_to_active_many`` (several pick-ups in one call) and
    ``move_to_finished_call`` + :meth:`run_many` (batched finishes). These are written in
    :mod:`.worker_calls` and named in this class's body (no part: one lookup more a job).
    The calls off the hot path come in parts made on each use (they hold nothing but
    this object and its keys): :attr:`admin` (getters and bulk admin), :attr:`flows`
    (parents and children) and :attr:`schedulers` (job schedulers).
    """

    def __init__(self, client: "redis.Redis", keys: QueueKeys, lib: Optional[ScriptLibrary] = None) -> None:
        self.client = client
        self.keys = keys
        self.lib = lib or library()
        # A connection of the client's pool kept checked out for this instance's EVALSHAs
        # (see kept_connection.py), or None when the client cannot lend one. Given back by
        # release_connections() or when this object is collected.
        # The connections are the client's, shared by every Scripts made on it (the workers
        # of a process that share one client share them): see lanes.py.
        self._lanes = ScriptLanes.of(client)
        self._kept: Optional[KeptConnection] = self._lanes.kept
        # On a Redis Cluster: the calls go to the primary serving the queue's slot and
        # follow its redirects (cluster.py); the queue's keys must share a hash tag.
        self._cluster: Optional[ClusterRouter] = None
        if self._lanes.cluster is not None:
            require_hash_tag(keys.prefix, keys.name)
            self._cluster = self._lanes.cluster
        # On the thread that built this object, with patched sockets and hiredis, the calls
        # of its greenlets share one connection, pipelined (pipelined.py); made on first use.
        self._owner = _thread_id() if self._kept is not None and pipelining_available() else None
        # raw redis-py pipelines given to queue_call: the script calls queued on each, by
        # position, so execute_pipeline can replay a NOSCRIPT
        self._on_pipes: "weakref.WeakKeyDictionary[Any, List[Tuple[int, ScriptCall]]]" = \
            weakref.WeakKeyDictionary()

    # -- the parts ----------------------------------------------------------------------
    @property
    def admin(self) -> AdminScripts:
        """The getters' and admin calls' scripts (:mod:`.admin`)."""
        return AdminScripts(self)

    @property
    def flows(self) -> FlowScripts:
        """The flow scripts (:mod:`.flows`)."""
        return FlowScripts(self)

    @property
    def schedulers(self) -> SchedulerScripts:
        """The job schedulers' scripts (:mod:`.schedulers`)."""
        return SchedulerScripts(self)

    # -- low level ----------------------------------------------------------------------
    def load_all(self, client: Optional["redis.Redis"] = None) -> None:
        """SCRIPT LOAD every script (one pipeline). Optional: calls load lazily anyway."""
        c = client or self.client
        if is_cluster(c):
            for name in self.lib.sources:  # to every primary
                c.script_load(self.lib.sources[name])
            return
        pipe = c.pipeline(transaction=False)
        for name in self.lib.sources:
            pipe.script_load(self.lib.sources[name])
        pipe.execute()

    def load(self, names: Sequence[str]) -> None:
        """SCRIPT LOAD the scripts ``names``, one command each, in one round trip on the
        connection script calls take. Nothing on a cluster (a call there loads its script on
        the node that answers NOSCRIPT). Raises the first Redis error, or a connection error."""
        if self._cluster is not None or not names:
            return
        answers = self.send([("SCRIPT", "LOAD", self.lib.sources[name]) for name in names], True)
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer

    @property
    def kept_connection(self) -> Optional[KeptConnection]:
        """The connection kept for script calls (``None`` when the client cannot lend one)."""
        return self._kept

    @property
    def clustered(self) -> bool:
        """Whether the calls go to a Redis Cluster (each queue on the primary of its slot)."""
        return self._cluster is not None

    @property
    def pipelined(self) -> bool:
        """Whether calls from the running greenlet share the pipelined connection (they
        are then written together with the calls of other greenlets of the same hub turn,
        so batching them by hand gains nothing)."""
        return self._owner is not None and self._owner == _thread_id()

    @property
    def _pipe(self) -> Optional[PipelinedConnection]:
        """The pipelined connection of the thread that built this object, once made."""
        return self._lanes.pipes.get(self._owner) if self._owner is not None else None

    def _lane(self) -> Any:
        """The pipelined connection for calls from its thread, else the kept connection."""
        if self._owner is not None and self._owner == _thread_id():
            return self._lanes.pipe(self._owner)
        return self._kept

    def gather_turn(self) -> None:
        """On the pipelined connection: the next call of this hub turn is written with the
        turn's other calls at its end, not at once (see
        :meth:`PipelinedConnection.gather_turn`); elsewhere nothing."""
        if self.pipelined and self._cluster is None:
            self._lanes.pipe(self._owner).gather_turn()

    def release_connections(self) -> None:
        """Give the connections kept for script calls back to the client's pool (they are
        taken again on the next call). Queue.close and Worker's close call it; idempotent.
        The connections are shared by every Scripts of the client: another user's next call
        checks one out of the pool again (the pool keeps it open), nothing is lost."""
        pipe = self._pipe
        if pipe is not None:
            pipe.release()
        if self._kept is not None:
            self._kept.release()
        if self._cluster is not None:
            self._cluster.release()

    def _evalsha(self, call: ScriptCall) -> Tuple[Any, ...]:
        return ("EVALSHA", self.lib.shas[call.name], len(call.keys), *call.keys, *call.args)

    def call(self, name: str, keys: Sequence[Any], args: Sequence[Any],
             client: Optional["redis.Redis"] = None, resend: Optional[bool] = None) -> Any:
        """EVALSHA ``name`` with ``keys``/``args``; on NOSCRIPT load it and try once more.
        The raw answer: negative codes are not checked (see :meth:`run`).

        ``resend`` (default: whether ``name`` is in :data:`RESEND_SAFE`) says whether the
        call may be sent again when the connection fails after it was written; when not,
        that failure raises :class:`~echomq_gevent.connection.kept.AmbiguousCallError`.
        A client that cannot lend a kept connection (see :class:`KeptConnection`) follows
        its own retry policy instead."""
        c = client or self.client
        sha = self.lib.shas[name]
        own = c is self.client  # (is_cluster is an isinstance against an ABC: slow, not per call)
        if (own and self._cluster is not None) or (not own and is_cluster(c)):
            router = self._cluster if own and self._cluster is not None else ClusterRouter(c)
            safe = name in RESEND_SAFE if resend is None else resend
            return router.call(("EVALSHA", sha, len(keys), *keys, *args), safe, self.lib.sources_by_sha)
        kept = self._lane() if own else None
        if kept is not None:
            safe = name in RESEND_SAFE if resend is None else resend
            command = ("EVALSHA", sha, len(keys), *keys, *args)
            try:
                return kept.call_command(command, safe)
            except NoScriptError:
                kept.call("SCRIPT", "LOAD", self.lib.sources[name])
                return kept.call_command(command, safe)
        try:
            return c.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            c.script_load(self.lib.sources[name])
            return c.evalsha(sha, len(keys), *keys, *args)

    def run(self, call: ScriptCall) -> Any:
        """Run one :class:`ScriptCall`; a negative answer raises its typed error."""
        return self.check(call.name, self.call(call.name, call.keys, call.args), call.job_id)

    def run_many(self, calls: Sequence[ScriptCall], check: bool = True) -> List[Any]:
        """Run ``calls`` in one round trip; the answers in order, a script error (with
        ``check``, also a negative code as its typed error) in place of its answer.
        Calls that met NOSCRIPT had no effect; they are loaded and run again one by one.
        A connection error raises (none of the answers is known)."""
        if not calls:
            return []
        if len(calls) == 1:
            try:
                results: List[Any] = [self.call(calls[0].name, calls[0].keys, calls[0].args)]
            except ResponseError as exc:
                results = [exc]
        else:
            results = self.send([self._evalsha(c) for c in calls], all(c.name in RESEND_SAFE for c in calls))
        for i, res in enumerate(results):
            c = calls[i]
            if isinstance(res, NoScriptError):
                try:
                    res = results[i] = self.call(c.name, c.keys, c.args)
                except ResponseError as exc:
                    results[i] = exc
                    continue
            if check and isinstance(res, int) and res < 0:
                results[i] = error_for_code(res, c.name, c.job_id)
        return results

    def send(self, commands: Sequence[Sequence[Any]], resend: bool) -> List[Any]:
        """Commands of this queue's slot (EVALSHAs, plain reads of its keys) in one round
        trip on the connection script calls take; the answers in order, a Redis error in
        place of its answer (NOSCRIPT included: the caller loads and calls again).
        ``resend``: every command may be sent again when the connection fails after the
        write (:data:`RESEND_SAFE`). A connection error raises."""
        if self._cluster is not None:
            return self._cluster.run(commands, resend, self.lib.sources_by_sha)
        if self._kept is not None:
            return self._lane().call_many(commands, resend=resend)
        return through_client(self.client, commands)

    def batch(self) -> ScriptBatch:
        """An empty :class:`ScriptBatch` of this queue's scripts."""
        return ScriptBatch(self)

    def queue_call(self, pipe: Any, name: str, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Queue a call on a :class:`ScriptBatch` (sent on the kept connection) or on a
        redis-py pipeline (e.g. a transaction); run it with :meth:`execute_pipeline`."""
        call = ScriptCall(name, list(keys), list(args))
        if isinstance(pipe, ScriptBatch):
            pipe.add(call)
            return
        queued = self._on_pipes.setdefault(pipe, [])
        queued.append((len(pipe), call))
        pipe.execute_command(*self._evalsha(call))

    def execute_pipeline(self, pipe: Any) -> List[Any]:
        """Run what :meth:`queue_call` queued on ``pipe``: the answers in order, script
        errors in place. Calls that failed with NOSCRIPT had no effect; they are loaded and
        run again one by one, so the answer list is complete."""
        if isinstance(pipe, ScriptBatch):
            return pipe.execute()
        queued = self._on_pipes.pop(pipe, [])
        results = pipe.execute(raise_on_error=False)
        for index, call in queued:
            if index < len(results) and isinstance(results[index], NoScriptError):
                results[index] = self.call(call.name, call.keys, call.args)
        return results

    def check(self, script: str, result: Any, job_id: Optional[str] = None) -> Any:
        """``result`` as it is, or the typed error of a negative answer (``errors.error_for_code``)."""
        if isinstance(result, int) and result < 0:
            raise error_for_code(result, script, job_id)
        return result

    def run_rows(self, name: str, keys: List[Any], head: Sequence[Any], rows: Sequence[Sequence[Any]],
                 most: int) -> List[Any]:
        """A script that takes several rows of ARGV after ``head`` and answers one per row
        (``moveToFinishedMany-11``, ``updateJobSchedulerMany-11``), in calls of at most
        ``most`` rows sent in one round trip. One answer per row, in order: the script's,
        or, where a call failed as a whole, its error. A connection error raises (none of
        the answers is known)."""
        chunks = [rows[i:i + most] for i in range(0, len(rows), most)]
        calls: List[ScriptCall] = []
        for chunk in chunks:
            args: List[Any] = list(head)
            for row in chunk:
                args.extend(row)
            calls.append(ScriptCall(name, keys, args))
        results: List[Any] = []
        for chunk, answers in zip(chunks, self.run_many(calls, check=False)):
            if isinstance(answers, BaseException):  # the call did not run (or failed as a whole)
                results.extend([answers] * len(chunk))
                continue
            if not isinstance(answers, list) or len(answers) != len(chunk):
                raise ResponseError(f"{name} answered {len(chunk)} rows with {answers!r}")
            results.extend(answers)
        return results

    # -- adding jobs (docs/protocol.md, "Adding jobs") -------------------------------
    def add_job_args(self, job_id: str, name: str, timestamp: Number, data_json: str,
                     encoded_opts: Dict[str, Any], parent_key: Optional[str] = None,
                     parent_deps_key: Optional[str] = None, parent: Optional[Dict[str, Any]] = None,
                     repeat_job_key: Optional[str] = None, dedup_key: Optional[str] = None,
                     defer_parent_release: bool = False) -> List[Any]:
        """ARGV of the add scripts: [packed positional array, data JSON, packed options].

        ``defer_parent_release`` (flow inserts): an existing completed child only records
        its result in the parent; ``releaseParentIfNoPendingDependencies-2`` releases the
        parent at the end of the flow's transaction."""
        if parent_key and self._cluster is not None:
            require_same_slot(f"job {job_id or '(new)'} of queue {self.keys.name!r} with parent {parent_key!r}",
                              self.keys.base, parent_key)
        positional = [self.keys.base, job_id, name, timestamp, parent_key, parent_deps_key, parent,
                      repeat_job_key, dedup_key]
        if defer_parent_release:
            positional.append(1)
        return [
            pack(positional),
            data_json,
            pack(encoded_opts),
        ]

    def add_script_for(self, encoded_opts: Dict[str, Any]) -> Tuple[str, List[str]]:
        """Which add script a job takes (client-side choice, docs/protocol.md "Adding jobs") and its KEYS."""
        k = self.keys
        delay = encoded_opts.get("delay")
        if isinstance(delay, (int, float)) and delay > 0:
            return "addDelayedJob-6", [k.marker, k.meta, k.id, k.delayed, k.completed, k.events]
        if encoded_opts.get("priority"):
            return "addPrioritizedJob-9", [k.marker, k.meta, k.id, k.prioritized, k.delayed,
                                           k.completed, k.active, k.events, k.pc]
        return "addStandardJob-9", [k.wait, k.paused, k.meta, k.id, k.completed, k.delayed,
                                    k.active, k.events, k.marker]

    def add_job(self, job_id: str, name: str, timestamp: Number, data_json: str,
                encoded_opts: Dict[str, Any], pipe: Any = None, **parent: Any) -> Optional[str]:
        """Add one job; returns its id (or the surviving id of a duplicate). With ``pipe``
        (a :meth:`batch`, or a redis-py pipeline) the call is queued and ``None`` returned;
        :meth:`execute_pipeline` runs it."""
        script, keys = self.add_script_for(encoded_opts)
        args = self.add_job_args(job_id, name, timestamp, data_json, encoded_opts, **parent)
        if pipe is not None:
            self.queue_call(pipe, script, keys, args)
            return None
        return str(self.check(script, self.call(script, keys, args, resend=bool(job_id)), job_id or None))

    # -- worker side (docs/protocol.md, "Fetching and finishing"; written in worker_calls.py) --
    fetch_opts = staticmethod(worker_calls.fetch_opts)
    move_to_active = worker_calls.move_to_active
    move_to_active_command = worker_calls.move_to_active_command
    load_wait_scripts = worker_calls.load_wait_scripts
    move_to_active_many = worker_calls.move_to_active_many
    move_to_finished_args = worker_calls.move_to_finished_args
    move_to_finished_call = worker_calls.move_to_finished_call
    move_to_finished_many = worker_calls.move_to_finished_many
    move_to_finished_queues = worker_calls.move_to_finished_queues
    move_to_finished = worker_calls.move_to_finished
    move_to_delayed = worker_calls.move_to_delayed
    retry_job = worker_calls.retry_job
    extend_lock = worker_calls.extend_lock
    extend_locks = worker_calls.extend_locks
    extend_locks_reading_marks = worker_calls.extend_locks_reading_marks
    move_stalled_jobs_to_wait = worker_calls.move_stalled_jobs_to_wait
    move_job_from_active_to_wait = worker_calls.move_job_from_active_to_wait

    # -- queue management (docs/protocol.md, "Queue administration") ---------------
    def pause(self, paused: bool, emit: bool = True) -> int:
        """``pause-7``. Pausing sets meta.paused; resuming also migrates a legacy paused
        list. Returns the number of legacy paused jobs still to migrate (call again)."""
        k = self.keys
        first, second = (k.wait, k.paused) if paused else (k.paused, k.wait)
        keys = [first, second, k.meta, k.prioritized, k.events, k.delayed, k.marker]
        return _int(self.call("pause-7", keys, ["paused" if paused else "resumed", "1" if emit else "0"]))

    def promote(self, job_id: str) -> int:
        k = self.keys
        keys = [k.delayed, k.wait, k.paused, k.meta, k.prioritized, k.active, k.pc, k.events, k.marker]
        return self.check("promote-9", self.call("promote-9", keys, [k.base, job_id]), job_id)

    def change_priority(self, job_id: str, priority: int, lifo: bool = False) -> int:
        k = self.keys
        keys = [k.wait, k.paused, k.meta, k.prioritized, k.active, k.pc, k.marker]
        res = self.call("changePriority-7", keys, [int(priority), k.base, job_id, "1" if lifo else "0"])
        return self.check("changePriority-7", res, job_id)

    def update_progress(self, job_id: str, progress_json: str,
                        client: Optional["redis.Redis"] = None) -> int:
        k = self.keys
        res = self.call("updateProgress-3", [k.job(job_id), k.events, k.meta], [job_id, progress_json], client)
        return self.check("updateProgress-3", res, job_id)

    def add_log(self, job_id: str, line: str, keep_logs: Optional[int] = None,
                client: Optional["redis.Redis"] = None) -> int:
        """``addLog-2``: returns the number of log lines kept."""
        k = self.keys
        res = self.call("addLog-2", [k.job(job_id), k.logs(job_id)],
                        [job_id, line, "" if keep_logs is None else int(keep_logs)], client)
        return self.check("addLog-2", res, job_id)

    def update_data(self, job_id: str, data_json: str, client: Optional["redis.Redis"] = None) -> int:
        res = self.call("updateData-1", [self.keys.job(job_id)], [data_json], client)
        return self.check("updateData-1", res, job_id)

    def get_counts(self, types: Iterable[str], delayed_cutoff_ms: Optional[int] = None) -> List[int]:
        """``getCounts-1`` for BullMQ type names (``wait`` not ``waiting``).

        With ``delayed_cutoff_ms`` (an integer timestamp) ``delayed`` counts only the
        jobs due strictly before it."""
        args: List[Any] = list(types)
        if delayed_cutoff_ms is not None:
            args.insert(0, int(delayed_cutoff_ms))
        return [int(x) for x in self.call("getCounts-1", [self.keys.base], args)]

    def get_state(self, job_id: str) -> str:
        k = self.keys
        keys = [k.completed, k.failed, k.delayed, k.active, k.wait, k.paused, k.waiting_children,
                k.prioritized]
        return str(self.call("getStateV2-8", keys, [job_id]))

    def remove_job(self, job_id: str, remove_children: bool = True) -> int:
        """``removeJob-2``: 1 removed, 0 locked (active), raises for -8."""
        k = self.keys
        res = self.call("removeJob-2", [k.job(job_id), k.repeat],
                        [job_id, "1" if remove_children else "0", k.base])
        return self.check("removeJob-2", res, job_id)

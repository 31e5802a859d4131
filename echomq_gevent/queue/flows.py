"""FlowProducer: add trees of parent and child jobs across queues, and read them back.

A flow is a tree of jobs where a parent runs only once its children are done (each
child's result lands in the parent's ``<id>:processed`` hash, read with
``job.get_children_values()``). The jobs may live in any number of queues; they are
written in one MULTI/EXEC transaction, exactly as Node BullMQ's ``FlowProducer``
writes them, so Node workers and ours process the same flows::

    flows = FlowProducer(connection="redis://localhost:6379/0")
    tree = flows.add({
        "name": "render", "queueName": "renders", "data": {"movie": 7},
        "children": [
            {"name": "frame", "queueName": "frames", "data": {"n": 1}},
            {"name": "frame", "queueName": "frames", "data": {"n": 2}},
        ],
    })
    tree["job"].id, [c["job"].id for c in tree["children"]]

A node is a mapping ``{"name", "queueName", "data", "opts", "children", "prefix"}``;
``opts`` takes the options of ``Queue.add``. Each job's id is ``opts.jobId`` or a new
UUID (as Node). Nodes with children enter ``waiting-children`` (``addParentJob-6``);
the others are added as ``Queue.add`` adds them, with their parent link. The failure
policy of a child (``failParentOnFailure``, ``continueParentOnFailure``,
``ignoreDependencyOnFailure``, ``removeDependencyOnFailure``) goes in its ``opts``.

A FlowProducer may be shared by every greenlet of a process.
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from redis.exceptions import ResponseError

from ..protocol.clock import now_ms
from ..connection.cluster import is_cluster, require_same_slot
from ..connection.routing import run_transaction
from ..connection.clients import DEFAULT_URL, ConnectionLike, close_client, make_client
from ..errors import EchoMQError, ScriptError, error_for_code
from .job import Job
from .dependencies import parse_job_key
from ..protocol.keys import DEFAULT_PREFIX, validate_prefix, validate_queue_name
from ..protocol.flows import ScriptCall
from .queue import Queue
from ..protocol.library import library

__all__ = ["FlowProducer", "FlowError", "parse_job_key"]

#: The keys a flow node may have (Node's FlowJob).
NODE_KEYS = ("name", "queueName", "data", "opts", "children", "prefix")


class FlowError(EchoMQError, ValueError):
    """A flow tree is malformed; the message names the node (``root.children[1]``) and
    the field."""


class _Entry:
    """One node of a flow being added: its queue, its validated job, its script call."""

    __slots__ = ("path", "queue", "prepared", "call", "children")

    def __init__(self, path: str, queue: Queue, prepared: Any, call: ScriptCall) -> None:
        self.path = path
        self.queue = queue
        self.prepared = prepared
        self.call = call
        self.children: Optional[List["_Entry"]] = None


class FlowProducer:
    """Adds flows (trees of jobs) and reads them back (Node's ``FlowProducer``).

    ``connection`` is a Redis URL or a ``redis.Redis`` instance, ``prefix`` the key
    prefix of every node that does not name its own. ``plugins`` (a
    :class:`~echomq_gevent.plugins.PluginHost`) runs every :meth:`add` and
    :meth:`add_bulk` through the plugins' ``echomq_add_flows`` hook (producer-side
    tracing, e.g. ``echomq_gevent.contrib.otel.producer_plugins()``).
    """

    def __init__(self, connection: ConnectionLike = DEFAULT_URL, prefix: str = DEFAULT_PREFIX,
                 max_connections: Optional[int] = None, plugins: Any = None) -> None:
        self.prefix = validate_prefix(prefix)
        self.client = make_client(connection, max_connections=max_connections)
        self._owns_client = self.client is not connection
        self._queues: Dict[Tuple[str, str], Queue] = {}
        self.plugins = plugins

    def __repr__(self) -> str:
        return f"FlowProducer(prefix={self.prefix!r})"

    def __enter__(self) -> "FlowProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Release the connections this producer opened (a client passed in stays open)."""
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()
        if self._owns_client:
            close_client(self.client)

    def queue(self, name: str, prefix: Optional[str] = None) -> Queue:
        """The Queue (on this producer's connection) that flow nodes of ``name`` go to."""
        key = (prefix or self.prefix, name)
        found = self._queues.get(key)
        if found is None:
            found = self._queues[key] = Queue(name, connection=self.client, prefix=key[0])
        return found

    # -- adding ----------------------------------------------------------------------
    def add(self, flow: Mapping[str, Any],
            queues_options: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Dict[str, Any]:
        """Add one flow atomically; returns the tree of created jobs,
        ``{"job": Job, "children": [{"job": Job, ...}, ...]}`` (``children`` only for nodes
        that have some).

        ``queues_options`` is Node's ``{queueName: {"defaultJobOptions": {...}}}``: options
        merged under the nodes' own for that queue. Every node is validated before
        anything is written (FlowError, InvalidOptionError... naming the node). Raises
        ParentJobNotExist when the root's ``opts.parent`` names a missing job (nothing is
        written), ParentJobCannotBeReplaced when a child's custom id belongs to another
        parent (the rest of the flow was written; that parent keeps waiting).
        """
        if self.plugins is not None:
            return self.plugins.add_flows(self, "addFlow", [flow],
                                          lambda flows: self._add(flows, queues_options, "root"))[0]
        return self._add([flow], queues_options, "root")[0]

    def add_bulk(self, flows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
        """Add several flows in one transaction; returns their trees in order. Validation
        as in :meth:`add`; a script error of one flow (named by its index) is raised after
        the transaction, in which the other flows were written."""
        if isinstance(flows, Mapping) or not isinstance(flows, Sequence):
            raise FlowError(f"add_bulk takes a list of flow trees, got {type(flows).__name__}")
        if self.plugins is not None and flows:
            return self.plugins.add_flows(self, "addBulkFlows", list(flows),
                                          lambda copied: self._add(copied, None, "flows[{}]"))
        return self._add(list(flows), None, "flows[{}]")

    def _add(self, flows: List[Mapping[str, Any]], queues_options: Optional[Mapping[str, Any]],
             root_path: str) -> List[Dict[str, Any]]:
        entries: List[_Entry] = []
        roots = []
        for index, flow in enumerate(flows):
            path = root_path.format(index)
            roots.append(self._collect(flow, path, None, queues_options, entries))
        if not entries:
            return []
        calls = [entry.call for entry in entries]
        parents: Dict[str, ScriptCall] = {}
        now = now_ms()
        for entry in entries:
            kw = entry.prepared.script_kwargs
            if "parent_key" in kw and kw["parent_key"] not in parents:
                parent = kw["parent"]
                parent_prefix, parent_queue = parent["queueKey"].rsplit(":", 1)
                scripts = self.queue(parent_queue, parent_prefix).scripts
                parents[kw["parent_key"]] = scripts.flows.release_parent_call(parent["id"], now)
        results = self._transaction(calls + list(parents.values()))
        failure: Optional[BaseException] = None
        for entry, res in zip(entries, results[:len(entries)]):
            if isinstance(res, ResponseError):
                failure = failure or EchoMQError(f"flow node {entry.path}: {entry.call[0]} failed: {res}")
            elif isinstance(res, int) and res < 0:
                failure = failure or self._explain(entry, res)
            else:
                entry.prepared.job_id = str(res)
        for res in results[len(entries):]:
            if isinstance(res, ResponseError):
                failure = failure or EchoMQError(f"releasing a parent at the end of the flow failed: {res}")
        if failure is not None:
            raise failure
        return [self._tree(root) for root in roots]

    def _collect(self, node: Any, path: str, parent: Optional[Dict[str, str]],
                 queues_options: Optional[Mapping[str, Any]], entries: List[_Entry]) -> _Entry:
        """Validate ``node`` (and its subtree) and append its script call(s) to ``entries``,
        parents before their children."""
        if not isinstance(node, Mapping):
            raise FlowError(f"flow node {path} must be a mapping with name, queueName, data, opts, "
                            f"children; got {type(node).__name__}")
        unknown = [k for k in node if k not in NODE_KEYS]
        if unknown:
            raise FlowError(f"flow node {path}: unknown field(s) {unknown}; a node has {', '.join(NODE_KEYS)}")
        queue_name = node.get("queueName")
        if queue_name is None or queue_name == "":
            raise FlowError(f"flow node {path}: 'queueName' is missing; every node names its queue")
        try:
            validate_queue_name(queue_name)
        except ValueError as exc:
            raise FlowError(f"flow node {path}: 'queueName' {exc}") from None
        prefix = node.get("prefix")
        if prefix is not None:
            try:
                validate_prefix(prefix)
            except ValueError as exc:
                raise FlowError(f"flow node {path}: 'prefix' {exc}") from None
        name = node.get("name")
        if not isinstance(name, str):
            raise FlowError(f"flow node {path}: 'name' must be a string, got {name!r}")
        opts = node.get("opts")
        if opts is not None and not isinstance(opts, Mapping):
            raise FlowError(f"flow node {path}: 'opts' must be a mapping of job options, got {type(opts).__name__}")
        children = node.get("children")
        if children is not None and (isinstance(children, (str, Mapping)) or not isinstance(children, Sequence)):
            raise FlowError(f"flow node {path}: 'children' must be a list of nodes, got {type(children).__name__}")
        opts = dict(opts or {})
        if parent is not None:
            if "parent" in opts:
                raise FlowError(f"flow node {path}: 'opts.parent' is set by the tree (this node's parent "
                                f"is the node above it); remove it")
            opts["parent"] = parent
        if children and opts.get("deduplication"):
            raise FlowError(f"flow node {path}: 'opts.deduplication' cannot be used on a node with children")
        defaults = ((queues_options or {}).get(queue_name) or {}).get("defaultJobOptions") or {}
        if defaults:
            merged = {k: v for k, v in defaults.items() if k != "jobId"}
            merged.update(opts)
            opts = merged
        queue = self.queue(queue_name, prefix)
        try:
            prepared = queue.prepare_job(name, node.get("data", {}), opts)
        except ScriptError:
            raise
        except EchoMQError as exc:
            raise type(exc)(f"flow node {path}: {exc}") from None
        if not prepared.job_id:
            prepared.job_id = str(uuid.uuid4())
        scripts = queue.scripts
        if children:
            script, keys = "addParentJob-6", scripts.flows.add_parent_job_keys()
        else:
            script, keys = scripts.add_script_for(prepared.encoded)
        args = scripts.add_job_args(prepared.job_id, name, prepared.timestamp, prepared.data_json,
                                    prepared.encoded, defer_parent_release=True, **prepared.script_kwargs)
        entry = _Entry(path, queue, prepared, (script, keys, args))
        entries.append(entry)
        if children:
            link = {"id": prepared.job_id, "queue": queue.qualified_name}
            entry.children = [self._collect(child, f"{path}.children[{i}]", link, queues_options, entries)
                              for i, child in enumerate(children)]
        return entry

    def _transaction(self, calls: List[ScriptCall]) -> List[Any]:
        """All ``calls`` in one MULTI/EXEC; the answers (errors in place). The scripts are
        loaded inside the same transaction, so none can be missing when it runs."""
        lib = library()
        if is_cluster(self.client):
            return self._cluster_transaction(calls)
        pipe = self.client.pipeline(transaction=True)
        try:
            names = sorted({name for name, _k, _a in calls})
            for name in names:
                pipe.script_load(lib.sources[name])
            for name, keys, args in calls:
                pipe.evalsha(lib.shas[name], len(keys), *keys, *args)
            results = pipe.execute(raise_on_error=False)
        finally:
            pipe.reset()
        return list(results[len(names):])

    def _cluster_transaction(self, calls: List[ScriptCall]) -> List[Any]:
        """The flow's MULTI/EXEC on the primary serving its slot. Every key of the flow
        must be in that one slot (queues with one hash tag); otherwise nothing is sent."""
        first = calls[0][1][0]
        for name, keys, _args in calls:
            for key in keys:
                require_same_slot(f"flow ({name})", first, key)
        return run_transaction(self.client, first, [(library().sources[name], library().shas[name], keys, args)
                                                    for name, keys, args in calls])

    @staticmethod
    def _explain(entry: _Entry, code: int) -> ScriptError:
        kw = entry.prepared.script_kwargs
        where = f"flow node {entry.path} (job name {entry.prepared.name!r}, queue {entry.queue.qualified_name!r})"
        if code == -5:
            detail = (f"{where}: opts.parent names {kw.get('parent_key')!r}, which does not exist; "
                      f"add the parent first (opts.parent is {{'id', 'queue': '<prefix>:<queue>'}}). "
                      f"Nothing of this flow was written")
        elif code == -7:
            detail = (f"{where}: custom id {entry.prepared.job_id!r} already belongs to another "
                      f"parent; it was not attached to {kw.get('parent_key')!r} (the rest of the "
                      f"flow was written)")
        else:
            detail = where
        return error_for_code(code, entry.call[0], entry.prepared.job_id, detail)

    @staticmethod
    def _tree(entry: _Entry) -> Dict[str, Any]:
        job = entry.queue.job_from_prepared(entry.prepared, entry.prepared.job_id)
        node: Dict[str, Any] = {"job": job}
        if entry.children is not None:
            node["children"] = [FlowProducer._tree(child) for child in entry.children]
        return node

    # -- reading -----------------------------------------------------------------------
    def get_flow(self, job_id: str, queue_name: str, depth: int = 10, max_children: int = 20,
                 prefix: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """A job and its children, ``depth`` levels deep (the job itself is level 1), at most
        ``max_children`` per group of children (processed, unprocessed, failed, ignored),
        as Node's ``getFlow``: ``{"job": Job, "children": [...]}`` (``children`` only when
        the job has some and depth allows); a child that no longer exists is None.
        Returns None when the job does not exist."""
        for label, value, low in (("depth", depth, 1), ("max_children", max_children, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise EchoMQError(f"get_flow: {label} must be an integer >= {low}, got {value!r}")
        return self._node(str(job_id), queue_name, prefix or self.prefix, depth, max_children)

    def _node(self, job_id: str, queue_name: str, prefix: str, depth: int,
              max_children: int) -> Optional[Dict[str, Any]]:
        job: Optional[Job] = self.queue(queue_name, prefix).get_job(job_id)
        if job is None:
            return None
        page = {"count": max_children}
        deps = job.get_dependencies(processed=page, unprocessed=page, failed=page, ignored=page)
        keys = [*deps["processed"], *deps["unprocessed"], *deps["failed"], *deps["ignored"]]
        if not keys or depth - 1 < 1:
            return {"job": job}
        children = []
        for key in keys:
            child_prefix, child_queue, child_id = parse_job_key(key)
            children.append(self._node(child_id, child_queue, child_prefix, depth - 1, max_children))
        return {"job": job, "children": children}

"""The relay's calls to Redis: one ``relay*`` Lua script per operation (``lua/relay*-1.lua``,
the keys, arguments and answers of Node bullmq 6.7.0's), plus the inbox's blocking wake-up.

Keys of a namespace live under ``<prefix>::relay:{<namespace>}`` (the empty segment keeps
them out of every queue's keys; the namespace is a hash tag). Every script takes
``<base>:nodes`` as its one key and the base key as its first argument; the registry of
namespaces, ``<prefix>::relay:namespaces``, has two scripts of its own.

:class:`RelayBackend` only passes arguments and decodes answers; the rules live in the
scripts. Its script calls go on one client (the caller's greenlet waits for the answer);
:meth:`wait_for_inbox` blocks in ``XREAD`` on a second, dedicated client named
``<base64 of the base key>:<node id>`` (Node's name for it, which ``get_node_connections``
looks for), and :meth:`interrupt` ends that wait with ``CLIENT UNBLOCK``.
"""
from __future__ import annotations

import base64
import json
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import redis
from redis.exceptions import NoScriptError

from ..connection.clients import clone_client, close_client
from ..connection.kept import KeptConnection
from ..protocol.library import library
from .errors import check_result

__all__ = ["RelayBackend", "InboxEntry", "LAYOUT_VERSION", "MINIMUM_REDIS", "_num"]

#: The data layout of Node's relay (``RELAY_LAYOUT_VERSION``): nodes of another layout
#: refuse to share a namespace (-6).
LAYOUT_VERSION = "1"
#: Scripts whose call is not sent again after a connection failed mid-call: a publish
#: may have run (sending it again would deliver it twice).
_NOT_RESENT = frozenset({"relayPublish-1"})
#: What the scripts need (``ZADD GT``, ``XTRIM``... as Node's ``RELAY_MINIMUM_REDIS_VERSION``).
MINIMUM_REDIS = (6, 2, 0)


class InboxEntry(NamedTuple):
    """One entry of a node's inbox: the message and the node's endpoints it is for."""

    id: str
    kind: str
    topic: str
    mid: str
    ts: int
    data: str
    endpoints: Tuple[str, ...]


def _num(value: Any, default: int = 0) -> int:
    """An integer read from Redis (``"12"``, ``"1.7e12"``); ``default`` for anything else."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


class RelayBackend:
    """The scripts of one namespace, called with Python arguments.

    Made by :class:`~echomq_gevent.relay.Relay`; its methods run on the calling greenlet
    (any greenlet of the relay's hub), except :meth:`wait_for_inbox`, which the relay's
    reader runs on its greenlet or, in a process that is not monkey-patched, in a pool
    thread, and :meth:`interrupt`, which any greenlet may call.
    """

    def __init__(self, client: "redis.Redis", prefix: str, namespace: str, node_id: str) -> None:
        self.client = client
        self.prefix = prefix
        self.namespace = namespace
        self.node_id = node_id
        self.base = self.namespace_key(namespace)
        self.nodes_key = f"{self.base}:nodes"
        self.registry_key = f"{prefix}::relay:namespaces"
        self.lib = library()
        self._blocking: Optional["redis.Redis"] = None
        self._blocking_id: Optional[int] = None
        self._touched_until = 0
        self._kept: Optional[KeptConnection] = KeptConnection.for_client(client)

    # -- keys and names ---------------------------------------------------------------
    def namespace_key(self, namespace: str) -> str:
        return f"{self.prefix}::relay:{{{namespace}}}"

    def inbox_key(self, node_id: str) -> str:
        return f"{self.base}:{node_id}:inbox"

    def node_key(self, node_id: str) -> str:
        return f"{self.base}:{node_id}:node"

    def inbox_connection_name(self, node_id: str) -> str:
        encoded = base64.b64encode(self.base.encode("utf-8")).decode("ascii")
        return f"{encoded}:{node_id}"

    # -- calling ----------------------------------------------------------------------
    def _run(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """EVALSHA ``name``; on NOSCRIPT (first use, a flushed or restarted server) load
        it and call once more. The calls go on a connection kept checked out (as the queue
        scripts' do, :mod:`~echomq_gevent.connection.kept`); a publish is never sent twice
        (a connection lost after it was written raises ``AmbiguousCallError``), every
        other script may be."""
        command = ("EVALSHA", self.lib.shas[name], len(keys), *keys, *args)
        kept = self._kept
        if kept is None:
            try:
                return self.client.execute_command(*command)
            except NoScriptError:
                self.client.script_load(self.lib.sources[name])
                return self.client.execute_command(*command)
        resend = name not in _NOT_RESENT
        try:
            return kept.call_command(command, resend)
        except NoScriptError:
            kept.call("SCRIPT", "LOAD", self.lib.sources[name])
            return kept.call_command(command, resend)

    def _exec(self, script: str, *args: Any, base: Optional[str] = None) -> Any:
        base = base or self.base
        return self._run(script, [f"{base}:nodes"], [base, *args])

    def redis_version(self) -> Tuple[int, ...]:
        text = str(self.client.info("server").get("redis_version", "0"))
        parts: List[int] = []
        for piece in text.split(".")[:3]:
            parts.append(_num(piece))
        return tuple(parts)

    # -- nodes ------------------------------------------------------------------------
    def register_node(self, node_id: str, lease_ms: int, info: Dict[str, Any], inbox_max_length: int) -> None:
        """relayRegisterNode, again while the id's old subscriptions are being pruned."""
        text = json.dumps(info, separators=(",", ":"), ensure_ascii=False)
        while True:
            result = check_result(self._exec("relayRegisterNode-1", node_id, lease_ms, text, LAYOUT_VERSION,
                                             inbox_max_length), node_id)
            if result != 0:
                break
        self.touch_namespace(lease_ms)

    def heartbeat(self, node_id: str, lease_ms: int) -> bool:
        alive = _num(self._exec("relayHeartbeat-1", node_id, lease_ms)) == 1
        if alive:
            self.touch_namespace(lease_ms)
        return alive

    def unregister_node(self, node_id: str) -> bool:
        return _num(self._exec("relayUnregisterNode-1", node_id)) == 1

    def sweep(self, limit: int) -> List[str]:
        return [str(x) for x in (self._exec("relaySweep-1", limit) or [])]

    def touch_namespace(self, for_ms: int) -> None:
        """List the namespace in the prefix's registry for ``for_ms`` more. Skipped while
        the entry written last still has two thirds of that to run (a heartbeat before
        every batch would otherwise pay a round trip for it; Node's sends it without
        waiting)."""
        now = int(time.time() * 1000)
        until = now + max(1, int(for_ms))
        if until - self._touched_until < max(1, int(for_ms)) // 3:
            return
        self._run("relayTouchNamespace-1", [self.registry_key], [self.namespace, max(1, int(for_ms))])
        self._touched_until = max(self._touched_until, until)

    # -- subscriptions and messages ---------------------------------------------------
    def subscribe(self, node_id: str, endpoint_id: str, pattern: str) -> Tuple[bool, Optional[Tuple[str, int, str]]]:
        """(added, (mid, ts, data) of the retained message or None)."""
        added, mid, ts, data = check_result(self._exec("relaySubscribe-1", node_id, endpoint_id, pattern), pattern)
        retained = (str(mid), _num(ts), data) if mid not in (None, "") else None
        return _num(added) == 1, retained

    def remove_endpoint(self, node_id: str, endpoint_id: str) -> int:
        return _num(self._exec("relayRemoveEndpoint-1", node_id, endpoint_id))

    def publish(self, topic: str, data: str, ts: int, retain_ms: int, max_size: int,
                inbox_max_length: int) -> Tuple[str, int, int]:
        mid, nodes, endpoints = check_result(
            self._exec("relayPublish-1", topic, data, ts, retain_ms, max_size, inbox_max_length), topic)
        if retain_ms > 0:
            self.touch_namespace(retain_ms)
        return str(mid), _num(nodes), _num(endpoints)

    def delete_retained(self, topic: str) -> bool:
        return _num(check_result(self._exec("relayDeleteRetained-1", topic), topic)) == 1

    # -- the inbox ----------------------------------------------------------------------
    def read_inbox(self, node_id: str, cursor: str, count: int) -> Tuple[List[InboxEntry], str]:
        """relayReadInbox: the next batch (empty when nothing is new) and the cursor after it."""
        result = self._exec("relayReadInbox-1", node_id, cursor, count)
        if not result:
            return [], cursor
        entries: List[InboxEntry] = []
        last = cursor
        for entry_id, flat in result[0][1]:
            last = entry_id
            if isinstance(flat, dict):
                fields = flat
            else:
                fields = {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}
            endpoints = tuple(e for e in (fields.get("e") or "").split(",") if e)
            entries.append(InboxEntry(entry_id, fields.get("k") or "", fields.get("t") or "", fields.get("m") or "",
                                      _num(fields.get("ts")), fields.get("d") or "", endpoints))
        return entries, last

    def trim_inbox(self, node_id: str, cursor: str, max_length: int) -> int:
        return _num(self._exec("relayTrimInbox-1", node_id, cursor, max_length))

    def open_inbox_connection(self, block_ms: int) -> None:
        """Make the dedicated client the inbox wait blocks on (named after the node)."""
        if self._blocking is None:
            self._blocking = clone_client(self.client, max_connections=1,
                                          client_name=self.inbox_connection_name(self.node_id),
                                          socket_timeout=block_ms / 1000.0 + 5)

    def wait_for_inbox(self, node_id: str, cursor: str, block_ms: int) -> None:
        """Block until an entry after ``cursor`` is in the inbox, ``block_ms`` passes or
        :meth:`interrupt` is called. Only a wake-up: the batch itself is read by
        :meth:`read_inbox`, atomically with the trimming of publishes."""
        self.open_inbox_connection(block_ms)
        client = self._blocking
        assert client is not None
        if self._blocking_id is None:
            self._blocking_id = int(client.client_id())
        try:
            client.xread({self.inbox_key(node_id): cursor}, count=1, block=block_ms)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self._blocking_id = None  # a new connection has a new id
            raise

    def interrupt(self) -> None:
        """End a :meth:`wait_for_inbox` in progress (``CLIENT UNBLOCK``); harmless if none."""
        blocked = self._blocking_id
        if blocked is not None:
            try:
                self.client.execute_command("CLIENT", "UNBLOCK", blocked)
            except redis.RedisError:
                pass

    def close(self) -> None:
        """Close the inbox client and give the kept connection back (the main client is
        the relay's to close)."""
        if self._kept is not None:
            self._kept.release()
        if self._blocking is not None:
            try:
                self._blocking.connection_pool.disconnect(inuse_connections=True)
            except Exception:  # pragma: no cover - best effort
                pass
            close_client(self._blocking)
            self._blocking = None
            self._blocking_id = None

    # -- read-only views ----------------------------------------------------------------
    def get(self, view: str, start: int = 0, end: int = -1, kind: str = "", value: str = "",
            base: Optional[str] = None) -> Any:
        return self._exec("relayGet-1", view, start, end, kind, value, base=base)

    def get_namespaces(self) -> List[str]:
        candidates = [str(n) for n in (self._run("relayGetNamespaces-1", [self.registry_key], []) or [])]
        return [n for n in candidates if _num(self.get("used", base=self.namespace_key(n))) == 1]

    def client_list(self) -> List[Dict[str, Any]]:
        return list(self.client.client_list())

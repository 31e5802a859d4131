"""What a :class:`~echomq_gevent.relay.relay.Relay` shows of its namespace (Node's
``getCounts``, ``getNodes``, ``getSubscriptions``...): the ``views`` part of a Relay, whose
methods of the same names call these. Each waits until the node is registered, then reads
with one script call (``Relay.get_node_connections``: ``CLIENT LIST``, every client: use on
demand). Call from any greenlet of the hub that made the relay.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .backend import _num
from .grammar import check_id, check_pattern

if TYPE_CHECKING:  # pragma: no cover
    from .relay import Relay

__all__ = ["RelayViews"]


def _check_range(start: Any, end: Any) -> Tuple[int, int]:
    for value in (start, end):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"relay range bounds must be integers, got {start!r}..{end!r}")
    if start < 0 or end < -1:
        raise ValueError(f"Invalid relay range: {start}..{end} (start >= 0, end >= -1, -1 = to the end)")
    return start, end


class RelayViews:
    """The views of one relay node (``relay.views``); :class:`~echomq_gevent.relay.relay.Relay`'s
    methods of the same names call these."""

    __slots__ = ("relay",)

    def __init__(self, relay: "Relay") -> None:
        self.relay = relay

    def get_counts(self) -> Dict[str, int]:
        """``{nodes, subscriptions, patterns, retained}`` of the namespace (nodes include
        expired ones not swept yet)."""
        self.relay.wait_until_ready()
        nodes, subs, patterns, retained = self.relay.backend.get("counts")
        return {"nodes": int(nodes), "subscriptions": int(subs), "patterns": int(patterns), "retained": int(retained)}

    def get_nodes(self, start: int = 0, end: int = -1) -> List[Dict[str, Any]]:
        """The namespace's nodes in registration order (inclusive positions; -1 = to the end)."""
        self.relay.wait_until_ready()
        rows = self.relay.backend.get("nodes", *_check_range(start, end))
        out = []
        for node_id, registered, lease, info, hb, backlog, dropped, subs in rows:
            try:
                decoded = json.loads(info) if info else {}
            except ValueError:
                decoded = {"unreadable": info}
            out.append({"id": node_id, "info": decoded, "registeredAt": _num(registered),
                        "leaseUntil": _num(lease), "lastHeartbeat": _num(hb) if hb else None,
                        "backlog": _num(backlog), "dropped": _num(dropped), "subscriptions": _num(subs)})
        return out

    def get_subscriptions(self, node_id: Optional[str] = None, pattern: Optional[str] = None,
                          start: int = 0, end: int = -1) -> List[Dict[str, str]]:
        """Subscriptions of the namespace, or of one node, or of one pattern."""
        if node_id is not None and pattern is not None:
            raise ValueError("get_subscriptions takes node_id or pattern, not both")
        kind, value = ("node", check_id("node_id", node_id)) if node_id is not None else \
            ("pattern", check_pattern(pattern)) if pattern is not None else ("", "")
        self.relay.wait_until_ready()
        rows = self.relay.backend.get("subscriptions", *_check_range(start, end), kind, value)
        return [{"nodeId": n, "endpointId": e, "pattern": p} for n, e, p in rows]

    def get_patterns(self, start: int = 0, end: int = -1) -> List[Dict[str, Any]]:
        self.relay.wait_until_ready()
        return [{"pattern": p, "subscriptions": int(n)} for p, n in self.relay.backend.get("patterns", *_check_range(start, end))]

    def get_retained(self, start: int = 0, end: int = -1) -> List[Dict[str, Any]]:
        """Retained messages by expiry; ``data`` as published (JSON text)."""
        self.relay.wait_until_ready()
        rows = self.relay.backend.get("retained", *_check_range(start, end))
        return [{"topic": t, "expiresAt": _num(x), "mid": str(m), "ts": _num(ts), "data": d}
                for t, x, m, ts, d in rows]

    def get_namespaces(self) -> List[str]:
        """The namespaces of this prefix with a live node or a retained message."""
        self.relay.wait_until_ready()
        return self.relay.backend.get_namespaces()

    def get_node_connections(self, node_id: Optional[str] = None) -> List[Dict[str, Any]]:
        """A node's inbox connection as Redis lists it (``address``, ``age``, ``idle`` in
        seconds); empty when it is not connected. Lists every client: use on demand."""
        target = check_id("node_id", node_id if node_id is not None else self.relay.node_id)
        self.relay.wait_until_ready()
        name = self.relay.backend.inbox_connection_name(target)
        db = str(self.relay.client.connection_pool.connection_kwargs.get("db", 0))
        return [{"address": c.get("addr"), "age": int(c.get("age", 0)), "idle": int(c.get("idle", 0))}
                for c in self.relay.backend.client_list() if c.get("name") == name and str(c.get("db")) == db]

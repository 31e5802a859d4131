"""What a :class:`~echomq_gevent.relay.relay.Relay` hands its users and keeps per
subscription: the message a listener gets (:class:`RelayMessage`), the answer of a publish
(:class:`PublishResult`), a subscription (:class:`Subscription`, which can end itself) and
the node's record of it (:class:`Endpoint`: its pattern, listener, and the live messages
held back while its retained message is read).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from .relay import Relay

__all__ = ["RelayMessage", "PublishResult", "Subscription", "Endpoint"]


class RelayMessage(NamedTuple):
    """What a listener gets: ``data`` is the publisher's value, decoded from JSON;
    ``retained`` is True for the retained message a new subscription starts with."""

    topic: str
    mid: str
    ts: int
    data: Any
    retained: bool


class PublishResult(NamedTuple):
    """``mid``: the message id (increasing per namespace); ``nodes``/``endpoints``: how many
    live nodes and subscriptions it was delivered to."""

    mid: str
    nodes: int
    endpoints: int


class Endpoint:
    """One subscription of this node: ``pending`` buffers live messages while its
    retained message is being read."""

    __slots__ = ("pattern", "listener", "active", "pending")

    def __init__(self, pattern: str, listener: Callable[[RelayMessage], Any]) -> None:
        self.pattern = pattern
        self.listener = listener
        self.active = True
        self.pending: Optional[List[Tuple[str, str, int, str]]] = []


class Subscription:
    """Returned by :meth:`Relay.subscribe`; :meth:`unsubscribe` removes it (idempotent)."""

    def __init__(self, relay: "Relay", endpoint_id: str, endpoint: Endpoint) -> None:
        self._relay = relay
        self.endpoint_id = endpoint_id
        self._endpoint = endpoint

    @property
    def pattern(self) -> str:
        return self._endpoint.pattern

    def unsubscribe(self) -> None:
        self._endpoint.active = False
        self._relay._remove_endpoint(self.endpoint_id)

    def __repr__(self) -> str:
        return f"Subscription({self.pattern!r}, endpoint_id={self.endpoint_id!r})"

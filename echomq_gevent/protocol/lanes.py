"""The connections the script calls of a client go on, shared by every
:class:`~echomq_gevent.protocol.scripts.Scripts` made on that client.

One set (:class:`ScriptLanes`) hangs on each client: the kept connection
(:mod:`echomq_gevent.connection.kept`), the pipelined connection of each thread that calls
(:mod:`echomq_gevent.connection.pipelined`) and, on a Redis Cluster, the router's connections
per primary. So the workers of a process that share one client (the runner's) hold one script
connection between them, not one each. :func:`shared_call` sends a plain command on them.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import gevent.monkey

from ..connection.cluster import is_cluster
from ..connection.kept import KeptConnection
from ..connection.pipelined import PipelinedConnection, pipelining_available
from ..connection.routing import ClusterRouter

__all__ = ["ScriptLanes", "shared_call", "thread_id"]

#: the OS thread id (``threading.get_ident`` names a greenlet once patched)
thread_id = gevent.monkey.get_original("_thread", "get_ident")


class ScriptLanes:
    """The connections script calls go on, one set per client, shared by every
    :class:`Scripts` made on that client: the kept connection, the pipelined connection of
    each thread that calls, and on a Redis Cluster the router's connections per primary.

    So the workers of a process that share one client (the runner's, per Redis and
    connection settings) hold one script connection between them, not one each. The set
    hangs on the client itself (a reference cycle, freed with the client), since the
    connections refer to their client."""

    __slots__ = ("kept", "cluster", "pipes")

    _ATTR = "_echomq_script_lanes"

    def __init__(self, client: Any) -> None:
        self.kept: Optional[KeptConnection] = KeptConnection.for_client(client)
        self.cluster: Optional[ClusterRouter] = ClusterRouter(client) if is_cluster(client) else None
        #: OS thread id -> the pipelined connection of that thread's hub
        self.pipes: Dict[int, PipelinedConnection] = {}

    @classmethod
    def of(cls, client: Any) -> "ScriptLanes":
        lanes = getattr(client, cls._ATTR, None)
        if lanes is None:
            lanes = cls(client)
            try:
                setattr(client, cls._ATTR, lanes)
            except AttributeError:  # pragma: no cover - a client class with __slots__
                pass
        return lanes

    def pipe(self, owner: int) -> PipelinedConnection:
        pipe = self.pipes.get(owner)
        if pipe is None:
            pipe = self.pipes[owner] = PipelinedConnection(self.kept)  # type: ignore[arg-type]
        return pipe


def shared_call(client: Any, *command: Any) -> Any:
    """Send one plain command (``CLIENT UNBLOCK``...) on the script connection the
    :class:`Scripts` of ``client`` share, so it opens no connection of its own: pipelined
    on the hub that calls, else on the kept connection, else through the client."""
    lanes = ScriptLanes.of(client)
    if lanes.kept is None:
        return client.execute_command(*command)
    owner = thread_id()
    if pipelining_available():
        return lanes.pipe(owner).call_command(tuple(command), True)
    return lanes.kept.call_command(tuple(command), True)

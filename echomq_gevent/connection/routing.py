"""Redis Cluster: a queue's script calls sent to the primary serving its slot.

:class:`ClusterRouter` sends a queue's script calls (one or a batch) on a connection
kept per primary (:class:`~echomq_gevent.connection.kept.KeptConnection`), and follows
``MOVED`` (the slot has a new owner: the map is updated and the call sent there),
``ASK`` (the slot is being migrated: ``ASKING`` and the call on the importing node),
``TRYAGAIN`` (a migration is half way for the call's keys), ``CLUSTERDOWN`` and
``READONLY`` (a failover is under way, or a demoted primary answered) and ``NOSCRIPT``
(the script is loaded on that node). Redis answers each of those *instead of* running
the call, so sending it again is safe. A connection that fails after a call was
written follows the no-replay rules of ``docs/reliability.md``: a call that is not safe
to send twice raises :class:`~echomq_gevent.connection.kept.AmbiguousCallError`.

:func:`run_transaction` runs script calls of one slot in a MULTI/EXEC (a flow's jobs).
The redirect reading (:func:`redirect_kind`, :func:`redirect_target`) and the slot map
update (:meth:`ClusterRouter.moved`) are shared with
:class:`~echomq_gevent.connection.slot_client.SlotClient`.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gevent
import redis
from gevent.monkey import get_original
from redis.exceptions import NoScriptError, RedisClusterException, ResponseError

from .cluster import key_slot
from .kept import AmbiguousCallError, KeptConnection

__all__ = ["ClusterRouter", "run_transaction", "redirect_kind", "redirect_target", "pause", "CONNECTION_ERRORS"]

log = logging.getLogger(__name__)

_thread_sleep = get_original("time", "sleep")
#: What a lost connection raises (redis-py's own errors and the socket's).
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


_REDIRECT_PREFIXES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN")


def redirect_kind(result: Any) -> Optional[str]:
    """``moved``, ``ask``, ``wait`` (TRYAGAIN, CLUSTERDOWN, READONLY, MASTERDOWN: not run,
    try again after a pause and a fresh look at the layout), or ``None``."""
    if not isinstance(result, ResponseError):
        return None
    from redis import exceptions as ex

    if isinstance(result, getattr(ex, "MovedError", ())):
        return "moved"
    if isinstance(result, getattr(ex, "AskError", ())):
        return "ask"
    if isinstance(result, (getattr(ex, "TryAgainError", ()), getattr(ex, "ClusterDownError", ()),
                           getattr(ex, "ReadOnlyError", ()), getattr(ex, "MasterDownError", ()))):
        return "wait"
    text = str(result)
    for word in _REDIRECT_PREFIXES:
        if text.startswith(word + " ") or text == word:
            return {"MOVED": "moved", "ASK": "ask"}.get(word, "wait")
    return None


def redirect_target(result: Any) -> Tuple[str, int, int]:
    """(host, port, slot) of a MOVED/ASK answer."""
    host, port, slot = getattr(result, "host", None), getattr(result, "port", None), getattr(result, "slot_id", None)
    if host is None:
        parts = str(result).split()  # "MOVED 3999 127.0.0.1:6381"
        slot = int(parts[-2])
        host, _, port_text = parts[-1].rpartition(":")
        port = int(port_text)
    return str(host), int(port), int(slot)


def pause(seconds: float) -> None:
    """Sleep without holding up the hub: on the main thread a gevent sleep (other greenlets,
    e.g. the one finishing a migration, run meanwhile, patched or not); on a native thread
    (the lock renewal) a plain sleep of that thread."""
    if threading.current_thread() is threading.main_thread():
        gevent.sleep(seconds)
    else:
        _thread_sleep(seconds)


class _Redirect:
    """A MOVED answer as redis-py's NodesManager takes it."""

    def __init__(self, host: str, port: int, slot: int) -> None:
        self.host, self.port, self.slot_id = host, port, slot
        self.node_addr = (host, port)
        self.message = f"{slot} {host}:{port}"


class _Direct:
    """A node client that cannot lend a kept connection: the same calls through it."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def call_many(self, commands: Sequence[Sequence[Any]], resend: bool = True) -> List[Any]:
        pipe = self.client.pipeline(transaction=False)
        try:
            for command in commands:
                pipe.execute_command(*command)
            return pipe.execute(raise_on_error=False)
        except CONNECTION_ERRORS as exc:
            if resend:
                raise
            raise AmbiguousCallError(f"the connection failed during {len(commands)} command(s) "
                                     f"({type(exc).__name__}: {exc}); they are not sent again", commands) from exc
        finally:
            pipe.reset()

    def release(self) -> None:
        pass


class ClusterRouter:
    """Script calls of one cluster client, sent to the primary serving their slot.

    Built by :class:`~echomq_gevent.protocol.scripts.Scripts` for a ``RedisCluster``; used from the
    greenlets of one hub, or from the one native thread that owns its client (the lock
    renewal). ``budget_s`` bounds how long one call keeps following redirects and waiting
    for a failover before it raises the last answer or error.
    """

    def __init__(self, cluster: Any, budget_s: Optional[float] = None) -> None:
        self.cluster = cluster
        if budget_s is None:
            timeout = cluster.get_connection_kwargs().get("socket_timeout") or 10.0
            budget_s = max(2.0, 2.0 * float(timeout))
        self.budget_s = budget_s
        self._kept: Dict[str, Tuple[Any, Any]] = {}
        #: redirects followed (MOVED, ASK, waits), for tests and logs
        self.redirects = {"moved": 0, "ask": 0, "wait": 0, "noscript": 0, "reconnect": 0}

    # -- topology ------------------------------------------------------------------------------
    def _owner(self, slot: int) -> Any:
        return self.cluster.nodes_manager.get_node_from_slot(slot)

    def _node(self, host: str, port: int) -> Any:
        node = self.cluster.get_node(host=host, port=port)
        if node is None:
            self.refresh()
            node = self.cluster.get_node(host=host, port=port)
        if node is None:
            raise redis.ConnectionError(f"the cluster redirected to {host}:{port}, a node it does not list")
        return node

    def refresh(self) -> None:
        """Ask the cluster for its layout again (after a failover or a failed node)."""
        try:
            self.cluster.nodes_manager.initialize()
        except Exception as exc:  # no node answers yet: the next call tries again
            log.debug("cluster layout refresh failed: %s", exc)

    def moved(self, host: str, port: int, slot: int) -> None:
        """Take a ``MOVED`` answer: ``slot`` is now served by ``host:port``. redis-py 5.1
        and later update the slot map at once (``NodesManager.move_slot``); older ones
        (4.6 is the lowest the package allows) take it as a pending ``MOVED`` that their
        next slot look-up applies. A failure to apply it asks for the whole layout."""
        manager = self.cluster.nodes_manager
        redirect = _Redirect(host, port, slot)
        move = getattr(manager, "move_slot", None)
        try:
            if move is not None:
                move(redirect)
            else:  # redis-py before 5.1: applied on the next look-up
                manager._moved_exception = redirect
        except Exception:
            self.refresh()

    def _conn(self, node: Any) -> Any:
        client = self.cluster.get_redis_connection(node)
        entry = self._kept.get(node.name)
        if entry is None or entry[0] is not client:
            if entry is not None:
                entry[1].release()
            entry = (client, KeptConnection.for_client(client) or _Direct(client))
            self._kept[node.name] = entry
        return entry[1]

    def release(self) -> None:
        """Give the kept connections back to their nodes' pools."""
        for _client, kept in list(self._kept.values()):
            kept.release()

    # -- calls ---------------------------------------------------------------------------------
    def run(self, commands: Sequence[Sequence[Any]], resend: bool,
            sources: Optional[Dict[str, str]] = None) -> List[Any]:
        """Send ``commands`` (EVALSHAs, keys of one slot each); the answers in order with a
        Redis error in place of its answer, as a non-transaction pipeline gives them.
        ``sources`` (sha -> Lua) loads a script a node does not know (NOSCRIPT) and runs
        the call again. A connection failure after a call that is not ``resend`` safe was
        written raises :class:`AmbiguousCallError`; one before, or of a safe call, is
        retried on the slot's (possibly new) owner within :attr:`budget_s`."""
        results: List[Any] = [None] * len(commands)
        pending = list(range(len(commands)))
        asking: Dict[int, Tuple[str, int]] = {}
        deadline = time.monotonic() + self.budget_s
        backoff = 0.02
        last_error: Optional[BaseException] = None
        while pending:
            groups: Dict[str, Tuple[Any, List[int]]] = {}
            retry: List[int] = []
            must_wait = False
            for i in pending:
                try:
                    node = self._node(*asking[i]) if i in asking else self._owner(_slot_of(commands[i]))
                except (redis.RedisError, RedisClusterException, OSError) as exc:  # slot not covered, node unknown
                    last_error = exc
                    retry.append(i)
                    must_wait = True
                    continue
                groups.setdefault(node.name, (node, []))[1].append(i)
            for node, idxs in groups.values():
                sent: List[Sequence[Any]] = []
                for i in idxs:
                    if i in asking:
                        sent.append(("ASKING",))
                    sent.append(commands[i])
                try:
                    answers = self._conn(node).call_many(sent, resend=resend)
                except AmbiguousCallError:
                    self.refresh()
                    raise
                except CONNECTION_ERRORS as exc:  # nothing was sent, or a safe call: again
                    last_error = exc
                    self.redirects["reconnect"] += 1
                    self.refresh()
                    retry.extend(idxs)
                    must_wait = True
                    continue
                pos = 0
                for i in idxs:
                    if i in asking:
                        pos += 1  # ASKING's own answer
                        del asking[i]
                    res = answers[pos]
                    pos += 1
                    kind = redirect_kind(res)
                    if kind is None and isinstance(res, NoScriptError) and sources and commands[i][0] == "EVALSHA":
                        self.redirects["noscript"] += 1
                        try:
                            self._conn(node).call_many([("SCRIPT", "LOAD", sources[commands[i][1]])], resend=True)
                        except CONNECTION_ERRORS as exc:
                            last_error = exc
                            must_wait = True
                        retry.append(i)
                        continue
                    if kind is None:
                        results[i] = res
                        continue
                    self.redirects[kind] += 1
                    last_error = res
                    results[i] = res
                    retry.append(i)
                    if kind == "moved":
                        self.moved(*redirect_target(res))
                    elif kind == "ask":
                        host, port, _slot = redirect_target(res)
                        asking[i] = (host, port)
                    else:
                        must_wait = True
                        if not str(res).startswith("TRYAGAIN"):
                            self.refresh()
            if not retry:
                break
            if time.monotonic() >= deadline:
                for i in retry:
                    if results[i] is None:
                        if isinstance(last_error, ResponseError) or last_error is None:
                            results[i] = last_error or ResponseError("the cluster kept redirecting")
                        else:
                            raise last_error
                break
            if must_wait:
                pause(backoff)
                backoff = min(backoff * 2, 0.5)
            pending = sorted(retry)
        return results

    def call(self, command: Sequence[Any], resend: bool, sources: Optional[Dict[str, str]] = None) -> Any:
        """One command through :meth:`run`; a Redis error is raised."""
        res = self.run([command], resend, sources)[0]
        if isinstance(res, ResponseError):
            raise res
        return res


def _slot_of(command: Sequence[Any]) -> int:
    """The slot of an EVALSHA/EVAL's first key (every key of a call shares it)."""
    if str(command[0]).upper() in ("EVALSHA", "EVAL") and int(command[2]) > 0:
        key = command[3]
    else:
        key = command[1]
    return key_slot(key if isinstance(key, str) else bytes(key).decode("utf-8"))


def run_transaction(cluster: Any, key: str, calls: Sequence[Tuple[str, str, Sequence[Any], Sequence[Any]]],
                    budget_s: float = 20.0) -> List[Any]:
    """Script calls ``(source, sha, keys, args)`` of ``key``'s slot in one MULTI/EXEC on
    the primary serving it, each script loaded inside the same transaction; the answers
    of the calls (errors in place). A transaction Redis refused whole (``MOVED``,
    ``TRYAGAIN``, a failover under way: ``EXECABORT``, nothing ran) is sent again, to
    the new owner, within ``budget_s``; a connection error is raised as it is (the
    transaction may have run) after the layout is looked up again."""
    router = ClusterRouter(cluster, budget_s=budget_s)
    slot = key_slot(key)
    deadline = time.monotonic() + budget_s
    backoff = 0.02
    sources = sorted({(source, sha) for source, sha, _k, _a in calls})
    while True:
        node = router._owner(slot)
        pipe = cluster.get_redis_connection(node).pipeline(transaction=True)
        try:
            for source, _sha in sources:
                pipe.script_load(source)
            for _source, sha, keys, args in calls:
                pipe.evalsha(sha, len(keys), *keys, *args)
            results = pipe.execute(raise_on_error=False)
            return list(results[len(sources):])
        except ResponseError as exc:
            kind = redirect_kind(exc)
            if kind is None or time.monotonic() >= deadline:
                raise
            if kind == "moved":
                router.moved(*redirect_target(exc))
            else:
                router.refresh()
                pause(backoff)
                backoff = min(backoff * 2, 0.5)
        except CONNECTION_ERRORS:
            router.refresh()
            raise
        finally:
            pipe.reset()

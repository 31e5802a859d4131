"""Redis Cluster: the ``redis+cluster://`` URL, the hash-tag rule and the calls that
follow the cluster's redirects.

A queue's scripts touch many of its keys in one call (``moveToActive-11`` takes eleven
and builds job keys inside Lua), so on a cluster every key of a queue must live in one
hash slot. Redis hashes only the part of a key between the first ``{`` and the next
``}`` when there is one (a *hash tag*); BullMQ's convention is a tag in the prefix
(``{bull}``: every queue in one slot) or in the queue name (``{orders}``: each queue in
its own slot, so queues spread over the primaries). :func:`require_hash_tag` refuses a
queue whose keys carry no tag, naming both fixes.

Calls go to the primary serving the slot:

* :class:`ClusterRouter` sends a queue's script calls (one or a batch) on a connection
  kept per primary (:class:`~echomq_gevent.kept_connection.KeptConnection`), and follows
  ``MOVED`` (the slot has a new owner: the map is updated and the call sent there),
  ``ASK`` (the slot is being migrated: ``ASKING`` and the call on the importing node),
  ``TRYAGAIN`` (a migration is half way for the call's keys), ``CLUSTERDOWN`` and
  ``READONLY`` (a failover is under way, or a demoted primary answered) and ``NOSCRIPT``
  (the script is loaded on that node). Redis answers each of those *instead of* running
  the call, so sending it again is safe. A connection that fails after a call was
  written follows the no-replay rules of ``docs/reliability.md``: a call that is not
  safe to send twice raises :class:`~echomq_gevent.kept_connection.AmbiguousCallError`.
* :class:`SlotClient` is the worker's blocking client for the marker wait
  (``BZPOPMIN``): a plain client of the primary serving the marker's slot, rebuilt when
  the slot moves.

redis-py's own ``RedisCluster`` serves everything else (plain reads and writes, which
it routes by key and retries itself).
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

import gevent
import redis
from gevent.monkey import get_original
from redis.exceptions import NoScriptError, RedisClusterException, ResponseError

from .errors import ConfigError
from .kept_connection import AmbiguousCallError, KeptConnection

try:  # redis-py >= 4.1
    from redis.cluster import ClusterNode, RedisCluster
except ImportError:  # pragma: no cover - redis-py without cluster support
    RedisCluster = None  # type: ignore
    ClusterNode = None  # type: ignore

__all__ = ["CLUSTER_SCHEME", "ClusterURL", "parse_cluster_url", "cluster_client", "clone_cluster",
           "is_cluster", "hash_tag", "require_hash_tag", "ClusterRouter", "SlotClient", "key_slot",
           "ClusterHashTagError",
           "CrossSlotError", "require_same_slot", "disconnect", "client_list_all", "run_transaction"]

log = logging.getLogger(__name__)

CLUSTER_SCHEME = "redis+cluster"
#: TLS to every node.
CLUSTER_TLS_SCHEME = "rediss+cluster"

_thread_sleep = get_original("time", "sleep")
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


class ClusterURL(NamedTuple):
    """What a ``redis+cluster://`` URL names."""

    nodes: List[Tuple[str, int]]
    username: Optional[str]
    password: Optional[str]
    tls: bool


class ClusterHashTagError(ConfigError):
    """A queue's keys carry no hash tag, so on a cluster they would spread over slots."""


class CrossSlotError(ValueError):
    """One call would touch keys of two hash slots (a flow whose jobs are in queues with
    different hash tags): a cluster cannot run it atomically, so it is refused before
    anything is written."""


def require_same_slot(what: str, key: str, other: str) -> None:
    """Refuse ``what`` when ``key`` and ``other`` hash to different slots."""
    if key_slot(key) != key_slot(other):
        raise CrossSlotError(
            f"{what}: {key!r} and {other!r} are in different hash slots of the Redis Cluster, and one "
            f"script cannot reach both. Give the queues of a flow the same hash tag (e.g. prefix "
            f"'{{bull}}' for all of them); BullMQ has the same rule")


def disconnect(client: Any) -> None:
    """Close the connections of every node's pool of a ``RedisCluster``."""
    for node in client.get_nodes():
        if node.redis_connection is not None:
            try:
                node.redis_connection.connection_pool.disconnect()
            except Exception:  # pragma: no cover - best effort
                pass


def client_list_all(client: Any) -> List[Dict[str, Any]]:
    """CLIENT LIST of every primary of a ``RedisCluster`` (a worker's blocking connection
    is on the primary serving its queue's slot)."""
    entries: List[Dict[str, Any]] = []
    for node in client.get_primaries():
        entries.extend(client.get_redis_connection(node).client_list())
    return entries


def _url_error(url: str, why: str) -> ValueError:
    redacted = re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)
    return ValueError(f"bad Redis Cluster URL {redacted!r}: {why}; the form is "
                      f"redis+cluster://[[user]:password@]host:port[,host:port...]/ "
                      f"(rediss+cluster:// for TLS)")


def parse_cluster_url(url: str) -> ClusterURL:
    """Split ``redis+cluster://[[user]:password@]h1:p1,h2:p2/``: a few nodes of the cluster
    to learn its layout from (any live one will do). Raises ``ValueError`` naming what is
    wrong."""
    parts = urlsplit(url)
    if parts.scheme not in (CLUSTER_SCHEME, CLUSTER_TLS_SCHEME):
        raise _url_error(url, f"the scheme must be {CLUSTER_SCHEME}:// or {CLUSTER_TLS_SCHEME}://")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, sep, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if sep else None
    nodes: List[Tuple[str, int]] = []
    for item in hostlist.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _url_error(url, f"each node must be host:port, got {item.strip()!r}")
        nodes.append((host.strip("[]"), int(port)))
    if parts.path.strip("/") not in ("", "0"):
        raise _url_error(url, f"a cluster has only database 0; the path must be / or empty, got {parts.path!r}")
    if parts.query and parse_qs(parts.query, keep_blank_values=True):
        raise _url_error(url, "it takes no query parameters (connection settings go in the YAML redis: "
                              "section or connection_settings=)")
    return ClusterURL(nodes, username, password, parts.scheme == CLUSTER_TLS_SCHEME)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a redis-py ``RedisCluster``."""
    return RedisCluster is not None and isinstance(client, RedisCluster)


#: RedisCluster's own keyword arguments besides those of the nodes' connections.
_CLUSTER_KWARGS = ("require_full_coverage", "reinitialize_steps", "dynamic_startup_nodes",
                   "address_remap", "cluster_error_retry_attempts")


def cluster_client(url: str, kwargs: Dict[str, Any]) -> Any:
    """A decoding ``RedisCluster`` for a ``redis+cluster://`` URL; ``kwargs`` are the
    nodes' connection settings (see :func:`~echomq_gevent.connection.make_client`)."""
    if RedisCluster is None:  # pragma: no cover
        raise ValueError("this redis-py has no Redis Cluster client; install redis>=4.6")
    parsed = parse_cluster_url(url)
    kwargs = dict(kwargs)
    kwargs.pop("db", None)
    if parsed.username:
        kwargs.setdefault("username", parsed.username)
    if parsed.password:
        kwargs.setdefault("password", parsed.password)
    if parsed.tls:
        kwargs.setdefault("ssl", True)
    kwargs.setdefault("require_full_coverage", False)  # a slot being failed over is not a reason to refuse
    return _new_cluster([ClusterNode(h, p) for h, p in parsed.nodes], kwargs)


def _new_cluster(startup: List[Any], kwargs: Dict[str, Any]) -> Any:
    # max_connections is per node in redis-py; one kept connection per node is taken
    client = RedisCluster(startup_nodes=startup, **kwargs)
    client._echomq_kwargs = dict(kwargs)  # what clone_cluster builds its clones from
    return client


def clone_cluster(client: Any, settings: Any = None, defaults: Any = None, **overrides: Any) -> Any:
    """A new ``RedisCluster`` (own connections) to the cluster ``client`` talks to,
    decoding responses: built with the same arguments when we made ``client``, else with
    its nodes' credentials, TLS and socket options. ``settings`` (ConnectionSettings)
    and ``overrides`` win; ``defaults`` (ConnectionSettings) fill the socket options a
    client passed in left unset."""
    kwargs = getattr(client, "_echomq_kwargs", None)
    if kwargs is None:
        from redis.cluster import cleanup_kwargs

        kwargs = cleanup_kwargs(**client.get_connection_kwargs())
        for key in ("connection_pool", "redis_connect_func", "driver_info", "lib_name", "lib_version",
                    "maint_notifications_config", "cache", "cache_config", "connection_pool_class"):
            kwargs.pop(key, None)
        if isinstance(kwargs.get("socket_keepalive_options"), dict) is False:
            kwargs.pop("socket_keepalive_options", None)
        for key, value in (defaults.client_kwargs().items() if defaults is not None else ()):
            if not kwargs.get(key):
                kwargs[key] = value
        kwargs.setdefault("require_full_coverage", False)
    kwargs = dict(kwargs)
    kwargs["decode_responses"] = True
    if settings is not None:
        kwargs.update(settings.client_kwargs())
    kwargs.update(overrides)
    startup = [ClusterNode(n.host, n.port) for n in client.get_nodes()] or \
        [ClusterNode(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()]
    return _new_cluster(startup, kwargs)


# -- hash tags -------------------------------------------------------------------------------
def hash_tag(key: str) -> Optional[str]:
    """The part of ``key`` Redis Cluster hashes when it is not the whole key: the text
    between the first ``{`` and the next ``}``, if that text is not empty."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1:end]


def require_hash_tag(prefix: str, queue: str) -> str:
    """Refuse a queue whose keys (``prefix:queue:...``) carry no hash tag: on a cluster
    its keys would hash to different slots and every script call would fail with
    ``CROSSSLOT``. Returns the tag. Raises :class:`ClusterHashTagError` naming the fixes."""
    tag = hash_tag(f"{prefix}:{queue}:")
    if tag is not None:
        return tag
    raise ClusterHashTagError(
        f"queue {queue!r} with prefix {prefix!r} is on a Redis Cluster, but its keys "
        f"({prefix}:{queue}:...) carry no hash tag, so they would land in different slots. "
        f"Put a hash tag in the prefix (prefix '{{{prefix}}}': every queue of that prefix in one "
        f"slot, as BullMQ's docs suggest) or in the queue name ('{{{queue}}}': each queue in its own "
        f"slot, spread over the primaries); Node producers and workers must use the same names")


def key_slot(key: str) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag or of the whole key, mod 16384)."""
    from redis.crc import key_slot as _slot

    return int(_slot(key.encode("utf-8")))


# -- calls that follow redirects -------------------------------------------------------------------
_REDIRECT_PREFIXES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN")


def _redirect_kind(result: Any) -> Optional[str]:
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


def _target(result: Any) -> Tuple[str, int, int]:
    """(host, port, slot) of a MOVED/ASK answer."""
    host, port, slot = getattr(result, "host", None), getattr(result, "port", None), getattr(result, "slot_id", None)
    if host is None:
        parts = str(result).split()  # "MOVED 3999 127.0.0.1:6381"
        slot = int(parts[-2])
        host, _, port_text = parts[-1].rpartition(":")
        port = int(port_text)
    return str(host), int(port), int(slot)


def _pause(seconds: float) -> None:
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
        except _CONNECTION_ERRORS as exc:
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

    Built by :class:`~echomq_gevent.scripts.Scripts` for a ``RedisCluster``; used from the
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

    def _moved(self, host: str, port: int, slot: int) -> None:
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
        pause = 0.02
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
                except _CONNECTION_ERRORS as exc:  # nothing was sent, or a safe call: again
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
                    kind = _redirect_kind(res)
                    if kind is None and isinstance(res, NoScriptError) and sources and commands[i][0] == "EVALSHA":
                        self.redirects["noscript"] += 1
                        try:
                            self._conn(node).call_many([("SCRIPT", "LOAD", sources[commands[i][1]])], resend=True)
                        except _CONNECTION_ERRORS as exc:
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
                        self._moved(*_target(res))
                    elif kind == "ask":
                        host, port, _slot = _target(res)
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
                _pause(pause)
                pause = min(pause * 2, 0.5)
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


class SlotClient:
    """A plain client of the primary that serves one key's slot, for the worker's marker
    wait (``BZPOPMIN`` blocks on one node: the one owning the marker key).

    ``kwargs`` are ``redis.Redis`` keyword arguments (client name, socket timeout, the
    connect hook); the connection settings come from the cluster's nodes. When the slot
    moves (``MOVED``, a failover) the client is rebuilt for the new owner. Used by the
    fetch loop's greenlet (or a pool thread) and, for ``CLIENT UNBLOCK``, by ``close``.
    """

    def __init__(self, cluster: Any, key: str, max_connections: int = 2, **kwargs: Any) -> None:
        self.cluster = cluster
        self.key = key
        self.slot = key_slot(key)
        base = dict(cluster.get_connection_kwargs())
        for name in ("host", "port", "connection_pool", "redis_connect_func", "retry", "cache",
                     "connection_pool_class", "maint_notifications_config", "himport_registry",
                     "oss_cluster_maint_notifications_handler"):
            base.pop(name, None)
        for name in list(base):
            if name.startswith("orig_"):
                base.pop(name)
        if not isinstance(base.get("socket_keepalive_options"), dict):
            base.pop("socket_keepalive_options", None)
        base.update(kwargs)
        base["decode_responses"] = True
        self._kwargs = base
        self._max_connections = max_connections
        self._client: Any = None
        self._node: Optional[str] = None
        self._router = ClusterRouter(cluster, budget_s=1.0)

    def _current(self) -> Any:
        node = self.cluster.nodes_manager.get_node_from_slot(self.slot)
        if self._client is None or node.name != self._node:
            old = self._client
            pool = redis.ConnectionPool(connection_class=node.redis_connection.connection_pool.connection_class,
                                        host=node.host, port=node.port,
                                        max_connections=self._max_connections, **self._kwargs)
            self._client, self._node = redis.Redis(connection_pool=pool), node.name
            if old is not None:
                try:
                    old.connection_pool.disconnect(inuse_connections=False)
                except Exception:  # pragma: no cover
                    pass
        return self._client

    @property
    def node(self) -> Optional[str]:
        """``host:port`` of the node the client talks to now."""
        return self._node

    @property
    def connection_pool(self) -> Any:
        return self._current().connection_pool if self._client is None else self._client.connection_pool

    def _follow(self, exc: BaseException) -> str:
        kind = _redirect_kind(exc) if isinstance(exc, ResponseError) else None
        if kind == "moved":
            self._router._moved(*_target(exc))
        elif kind is None or kind == "wait":
            self._router.refresh()
        return kind or "error"

    def bzpopmin(self, key: str, timeout: float) -> Any:
        """``BZPOPMIN key timeout`` on the slot's owner. A slot that moved is followed
        at once; during a migration (ASK, TRYAGAIN) the wait ends empty after a short
        pause (the fetch loop then tries a pick-up, which follows the migration)."""
        for _ in range(3):
            try:
                return self._current().bzpopmin(key, timeout)
            except ResponseError as exc:
                kind = self._follow(exc)
                if kind == "moved":
                    continue
                if kind in ("ask", "wait"):
                    _pause(min(0.1, timeout))
                    return None
                raise
            except _CONNECTION_ERRORS:
                self._router.refresh()
                raise
        return None

    def ping(self) -> Any:
        return self._current().ping()

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """On the node the marker wait talks to (``CLIENT UNBLOCK`` must go there)."""
        return self._current().execute_command(*args, **kwargs)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


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
    pause = 0.02
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
            kind = _redirect_kind(exc)
            if kind is None or time.monotonic() >= deadline:
                raise
            if kind == "moved":
                router._moved(*_target(exc))
            else:
                router.refresh()
                _pause(pause)
                pause = min(pause * 2, 0.5)
        except _CONNECTION_ERRORS:
            router.refresh()
            raise
        finally:
            pipe.reset()

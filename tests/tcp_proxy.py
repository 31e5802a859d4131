"""A TCP proxy between the code under test and Redis that the test controls: it can stop
forwarding, swallow replies or reset connections (the chaos tests, and the kept
connection's no-replay tests, which need a reply that is surely lost)."""
from __future__ import annotations

import collections
import itertools
import select
import socket
import struct
import threading
import time
from typing import Dict, Tuple


class ControlledProxy:
    """A TCP proxy between the code under test and Redis, run on native threads (so it
    keeps forwarding whatever the test's hub does).

    * :meth:`mute`: every open connection stops forwarding in both directions but stays
      open, as behind a NAT or a failover that dropped its state without FIN or RST;
      connections opened afterwards work normally.
    * :meth:`hold_replies`: every open connection still carries commands to Redis but
      no reply back: a command runs and its caller never learns it did.
    * :meth:`reset`: every open connection is closed with RST.
    * :attr:`latency`: seconds each chunk is held before it is forwarded (chunks that follow
      are not held back by it).
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.latency = 0.0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: Dict[int, Tuple[socket.socket, socket.socket, threading.Event]] = {}
        self._held: set = set()
        self._ids = itertools.count()
        self._closed = False
        self.accepted = 0
        self.delayed = 0  # chunks held by the latency
        threading.Thread(target=self._accept_loop, name="chaos-proxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            muted = threading.Event()
            pid = next(self._ids)
            with self._lock:
                self._pairs[pid] = (client, upstream, muted)
                self.accepted += 1
            threading.Thread(target=self._pump, args=(pid, client, upstream, muted), daemon=True,
                             name=f"chaos-proxy-{pid}").start()

    def _pump(self, pid: int, a: socket.socket, b: socket.socket, muted: threading.Event) -> None:
        peers = {a: b, b: a}
        # chunks read but not yet due: (due time, destination, data), in the order read; a link
        # with latency delays every chunk by it without holding back the ones that follow (a
        # slow link, not a narrow one)
        pending: collections.deque = collections.deque()
        try:
            while not self._closed and pid in self._pairs:
                if muted.is_set():  # hold everything: read nothing, send nothing, close nothing
                    time.sleep(0.05)
                    continue
                wait = 0.1
                if pending:
                    wait = min(wait, max(0.0, pending[0][0] - time.monotonic()))
                readable, _, _ = select.select([a, b], [], [], wait)
                if muted.is_set():
                    continue
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is b and pid in self._held:
                        continue  # a reply of a held connection: swallowed
                    if self.latency or pending:
                        pending.append((time.monotonic() + self.latency, peers[s], data))
                        self.delayed += 1
                    else:
                        peers[s].sendall(data)
                now = time.monotonic()
                while pending and pending[0][0] <= now:
                    _due, dest, data = pending.popleft()
                    dest.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            if not muted.is_set():
                self._drop(pid, rst=False)

    def _drop(self, pid: int, rst: bool) -> None:
        with self._lock:
            pair = self._pairs.pop(pid, None)
        if pair is None:
            return
        for s in pair[:2]:
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass

    def open_connections(self) -> int:
        with self._lock:
            return sum(1 for _c, _u, m in self._pairs.values() if not m.is_set())

    def mute(self) -> int:
        """Stop every open connection without closing it; returns how many."""
        with self._lock:
            pairs = [p for p in self._pairs.values() if not p[2].is_set()]
        for _c, _u, muted in pairs:
            muted.set()
        return len(pairs)

    def hold_replies(self) -> int:
        """Let every open connection carry commands but no replies; returns how many it held
        anew. A connection held before is not counted again: its client may have closed it
        already, and this proxy's thread may not yet have seen the close (on a loaded machine
        it can lag the client's next connection)."""
        with self._lock:
            ids = [pid for pid, p in self._pairs.items() if not p[2].is_set() and pid not in self._held]
            self._held.update(ids)
        return len(ids)

    def reset(self) -> int:
        """Close every open connection (muted ones included) with RST; returns how many."""
        with self._lock:
            ids = list(self._pairs)
        for pid in ids:
            self._drop(pid, rst=True)
        return len(ids)

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass
        self.reset()

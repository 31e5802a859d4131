"""What the chaos tests share (waiting is the ``wait_for`` fixture of ``tests/conftest.py``):
writing jobs as a foreign producer would, counting a job's end events, and a TCP proxy the test controls."""
from __future__ import annotations

import itertools
import json
import os
import select
import socket
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import redis

from echomq_gevent.keys import QueueKeys


def write_job(r: "redis.Redis", keys: QueueKeys, fields: Optional[Dict[str, Any]] = None,
              job_id: Optional[str] = None, raw: Optional[Callable[["redis.Redis", str], None]] = None) -> str:
    """Put a job in ``wait`` the way any producer speaking the protocol could: the hash
    (``fields`` as given, garbage included), the id pushed on ``wait`` and the marker.
    ``raw(r, job_key)`` writes the job key itself instead of ``fields`` (a wrong type,
    say); with neither, no hash is written at all."""
    if job_id is None:
        job_id = str(r.incr(keys.base + "id"))
    if raw is not None:
        raw(r, keys.job(job_id))
    elif fields:
        r.hset(keys.job(job_id), mapping={k: v for k, v in fields.items()})
    r.lpush(keys.wait, job_id)
    r.zadd(keys.marker, {"0": 0})
    return job_id


def good_fields(name: str = "task", data: Any = None, opts: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """The fields a well-behaved producer writes (as Node's ``Job.asJSON``)."""
    return {"name": name, "data": json.dumps(data if data is not None else {}),
            "opts": json.dumps(opts if opts is not None else {"attempts": 0}),
            "timestamp": str(int(time.time() * 1000)), "delay": "0", "priority": "0"}


def end_events(r: "redis.Redis", keys: QueueKeys) -> Dict[str, List[str]]:
    """job id -> the ``completed``/``failed`` events the queue's stream holds for it."""
    out: Dict[str, List[str]] = {}
    for _id, fields in r.xrange(keys.events):
        if fields.get("event") in ("completed", "failed"):
            out.setdefault(fields.get("jobId", "?"), []).append(fields["event"])
    return out


class ControlledProxy:
    """A TCP proxy between the code under test and Redis, run on native threads (so it
    keeps forwarding whatever the test's hub does).

    * :meth:`mute`: every open connection stops forwarding in both directions but stays
      open, as behind a NAT or a failover that dropped its state without FIN or RST;
      connections opened afterwards work normally.
    * :meth:`hold_replies`: every open connection still carries commands to Redis but
      no reply back: a command runs and its caller never learns it did.
    * :meth:`reset`: every open connection is closed with RST.
    * :attr:`latency`: seconds added before each chunk is forwarded.
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
        try:
            while not self._closed and pid in self._pairs:
                if muted.is_set():  # hold everything: read nothing, send nothing, close nothing
                    time.sleep(0.05)
                    continue
                readable, _, _ = select.select([a, b], [], [], 0.1)
                if muted.is_set():
                    continue
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is b and pid in self._held:
                        continue  # a reply of a held connection: swallowed
                    if self.latency:
                        time.sleep(self.latency)
                    peers[s].sendall(data)
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
        """Let every open connection carry commands but no replies; returns how many."""
        with self._lock:
            ids = [pid for pid, p in self._pairs.items() if not p[2].is_set()]
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


def runs_of(r: "redis.Redis", prefix: str) -> Dict[str, int]:
    """job id -> how many times a chaos worker process ran it (recorded in the session's Redis)."""
    counts: Dict[str, int] = {}
    for job_id in r.lrange(f"{prefix}:chaos:runs", 0, -1):
        counts[job_id] = counts.get(job_id, 0) + 1
    return counts


def add_jobs(url: str, qname: str, prefix: str, n: int, seconds: float = 0) -> List[str]:
    """Add ``n`` jobs whose processor sleeps ``seconds`` (batches of 500); their ids."""
    from echomq_gevent import Queue

    q = Queue(qname, connection=url, prefix=prefix)
    try:
        out: List[str] = []
        for start in range(0, n, 500):
            batch = [{"name": "work", "data": {"s": seconds}} for _ in range(min(500, n - start))]
            out.extend(j.id for j in q.add_bulk(batch))
        return out
    finally:
        q.close()


def assert_every_job_ended_once(queue_r: "redis.Redis", keys: QueueKeys, ids: List[str]) -> None:
    """Every job of ``ids`` is completed, with exactly one end event, and ``active`` is empty."""
    completed = set(queue_r.zrange(keys.completed, 0, -1))
    lost = [i for i in ids if i not in completed]
    assert not lost, f"{len(lost)} job(s) not completed, e.g. {lost[:10]}"
    events = end_events(queue_r, keys)
    twice = {i: e for i, e in events.items() if len(e) != 1}
    assert not twice, f"jobs with more than one end event: {dict(list(twice.items())[:10])}"
    assert queue_r.llen(keys.active) == 0


def record_figure(name: str, value: float, unit: str) -> None:
    """Add a measured figure to the JSON file named by ``$ECHOMQ_CHAOS_REPORT`` (``make
    chaos`` sets it; docs/reliability.md quotes it); nothing without it."""
    path = os.environ.get("ECHOMQ_CHAOS_REPORT")
    if not path:
        return
    data: Dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    data[name] = {"value": round(value, 2), "unit": unit}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)

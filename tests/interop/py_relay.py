"""One node of our ``echomq_gevent.Relay`` in its own gevent-patched process: the twin of
``node/relay_tool.js`` (same start command, stdin operations and output lines; see its
header). Also ``"slow": true``: each message listener blocks until ``{"op": "release"}``
arrives, as a listener doing slow work would hold up the messages behind it.

The test process itself is not monkey-patched; this one is, first thing, as a service
would be.
"""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import gevent.socket  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from echomq_gevent.relay import Relay  # noqa: E402

_OPTS = {"leaseDuration": "lease_duration", "heartbeatInterval": "heartbeat_interval",
         "sweepInterval": "sweep_interval", "blockTimeout": "block_timeout",
         "inboxMaxLength": "inbox_max_length", "lagThreshold": "lag_threshold",
         "maxMessageSize": "max_message_size"}


def emit(obj: Dict[str, Any]) -> None:
    obj = {"t": int(time.time() * 1000), **obj}
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    cmd = json.loads(sys.argv[1])
    opts = {_OPTS[k]: v for k, v in (cmd.get("opts") or {}).items()}
    relay = Relay(cmd["redis"], namespace=cmd["namespace"], node_id=cmd.get("nodeId"), name=cmd.get("name"),
                  prefix=cmd.get("prefix", "bull"), **opts)
    relay.on("error", lambda exc: emit({"event": "error", "error": str(exc)}))
    relay.on("lag", lambda backlog: emit({"event": "lag", "backlog": backlog}))
    relay.on("swept", lambda nodes: emit({"event": "swept", "nodes": nodes}))
    relay.on("recovered", lambda: emit({"event": "recovered"}))
    release = gevent.event.Event()
    slow = bool(cmd.get("slow"))
    subscriptions: Dict[str, Any] = {}

    def subscribe(pattern: str) -> None:
        def listener(msg: Any) -> None:
            emit({"event": "message", "pattern": pattern, "topic": msg.topic, "mid": msg.mid, "ts": msg.ts,
                  "data": msg.data, "retained": msg.retained})
            if slow:
                release.wait()
        subscriptions[pattern] = relay.subscribe(pattern, listener)

    def run(op: Dict[str, Any]) -> Any:
        name = op.get("op")
        if name == "publish":
            return relay.publish(op["topic"], op.get("data"), retain=op.get("retain") or 0)._asdict()
        if name == "publishMany":
            return [relay.publish(op["topic"], {"i": i, "sentAt": int(time.time() * 1000)}).mid
                    for i in range(op["count"])]
        if name == "subscribe":
            subscribe(op["pattern"])
            return True
        if name == "unsubscribe":
            subscriptions[op["pattern"]].unsubscribe()
            return True
        if name == "deleteRetained":
            return relay.delete_retained(op["topic"])
        if name == "getNodes":
            return relay.get_nodes()
        if name == "getCounts":
            return relay.get_counts()
        if name == "getSubscriptions":
            return relay.get_subscriptions()
        if name == "getRetained":
            return relay.get_retained()
        if name == "sweep":
            return relay.sweep()
        if name == "release":
            release.set()
            return True
        raise ValueError(f"unknown op {name!r}")

    def answer(op: Dict[str, Any]) -> None:
        try:
            emit({"event": "result", "tag": op.get("tag"), "ok": True, "result": run(op)})
        except Exception as exc:
            emit({"event": "result", "tag": op.get("tag"), "ok": False, "error": str(exc),
                  "name": type(exc).__name__, "code": getattr(exc, "code", None)})

    relay.wait_until_ready(30)
    for pattern in cmd.get("subscribe") or []:
        subscribe(pattern)
    emit({"event": "ready", "nodeId": relay.node_id})
    fd = sys.stdin.fileno()
    buf = b""
    while True:
        gevent.socket.wait_read(fd)
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        stopping = False
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            text = line.strip().decode("utf-8")
            if not text:
                continue
            if text == "stop":
                stopping = True
                break
            gevent.spawn(answer, json.loads(text))
        if stopping:
            break
    release.set()
    relay.close()
    emit({"event": "exit"})


if __name__ == "__main__":
    main()

"""Our ``Relay`` beside Node bullmq 6.7.0's ``Relay`` on one Redis, both directions.

Each node runs in its own process: Node's through ``node/relay_tool.js``, ours through its
twin ``py_relay.py`` (gevent-patched), driven alike (stdin operations, JSON lines out), so
every test runs with the roles swapped.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import uuid
from typing import Any, Dict, List

import pytest

from interop_node import HERE, NodeProcess, _node_binary

pytestmark = pytest.mark.interop

RELAY_TOOL = os.path.join(HERE, "node", "relay_tool.js")
PY_RELAY = os.path.join(HERE, "py_relay.py")
KINDS = ("node", "python")
_tags = itertools.count(1)


class RelayNodes:
    """Starts relay nodes of either kind on the test's Redis and prefix, one namespace."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.namespace = "ns" + uuid.uuid4().hex[:8]
        self.procs: List[NodeProcess] = []

    def start(self, kind: str, node_id: str, subscribe: List[str] = (), **fields: Any) -> NodeProcess:
        cmd = {"redis": self.redis_url, "prefix": self.prefix, "namespace": self.namespace, "nodeId": node_id,
               "subscribe": list(subscribe), **fields}
        argv = ([_node_binary(), RELAY_TOOL] if kind == "node" else [sys.executable, PY_RELAY]) + [json.dumps(cmd)]
        proc = NodeProcess(argv, cmd)
        self.procs.append(proc)
        proc.wait_event("ready", timeout=20)
        return proc

    @staticmethod
    def call(proc: NodeProcess, op: str, timeout: float = 20, **fields: Any) -> Dict[str, Any]:
        """Run one stdin operation; its result line (``ok`` true or false)."""
        tag = next(_tags)
        start = proc.mark()
        proc.send(json.dumps({"op": op, "tag": tag, **fields}))
        return proc.wait_event("result", timeout=timeout, start=start, tag=tag)

    def ok(self, proc: NodeProcess, op: str, **fields: Any) -> Any:
        line = self.call(proc, op, **fields)
        assert line["ok"], f"{op} failed: {line}; " + proc.describe()
        return line["result"]

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()


@pytest.fixture
def relays(redis_url, prefix):
    nodes = RelayNodes(redis_url, prefix)
    try:
        yield nodes
    finally:
        nodes.close()


def _messages(proc: NodeProcess, pattern: str = None) -> List[Dict[str, Any]]:
    return [ln for ln in proc.events("message") if pattern is None or ln["pattern"] == pattern]


@pytest.mark.parametrize("pub_kind,sub_kind", [("node", "python"), ("python", "node")])
def test_messages_reach_the_other_runtime_through_patterns(relays, pub_kind, sub_kind):
    sub = relays.start(sub_kind, "sub", subscribe=["jobs.*.done", "jobs.>", "jobs.7.done", "other.*"])
    pub = relays.start(pub_kind, "pub")
    sent = [("jobs.7.done", {"ok": True, "text": "é ✓"}), ("jobs.8.done", [1, 2, 3]),
            ("jobs.8.progress.50", 50), ("other.x.y", "too deep for other.*"), ("nothing", None)]
    results = [relays.ok(pub, "publish", topic=t, data=d) for t, d in sent]
    # endpoints reached: 3 (jobs.7.done), 2, 1, 0, 0; one node each time a pattern matched
    assert [(r["nodes"], r["endpoints"]) for r in results] == [(1, 3), (1, 2), (1, 1), (0, 0), (0, 0)]
    mids = [r["mid"] for r in results]
    assert all(int(a) < int(b) for a, b in zip(mids, mids[1:]))
    sub.wait_for(lambda ln: ln.get("event") == "message" and ln["topic"] == "jobs.8.progress.50", timeout=10,
                 what="the last delivered message")
    seen = {(m["pattern"], m["topic"], m["mid"], json.dumps(m["data"]), m["retained"]) for m in _messages(sub)}
    expected = {("jobs.*.done", "jobs.7.done", mids[0], json.dumps(sent[0][1]), False),
                ("jobs.>", "jobs.7.done", mids[0], json.dumps(sent[0][1]), False),
                ("jobs.7.done", "jobs.7.done", mids[0], json.dumps(sent[0][1]), False),
                ("jobs.*.done", "jobs.8.done", mids[1], json.dumps(sent[1][1]), False),
                ("jobs.>", "jobs.8.done", mids[1], json.dumps(sent[1][1]), False),
                ("jobs.>", "jobs.8.progress.50", mids[2], "50", False)}
    assert seen == expected
    assert len(_messages(sub)) == 6  # each subscription once per message
    # both runtimes list the same subscriptions
    assert relays.ok(pub, "getSubscriptions") == relays.ok(sub, "getSubscriptions")
    counts = relays.ok(sub, "getCounts")
    assert counts == {"nodes": 2, "subscriptions": 4, "patterns": 4, "retained": 0}


@pytest.mark.parametrize("pub_kind,sub_kind", [("node", "python"), ("python", "node")])
def test_one_publish_reaches_nodes_of_both_runtimes(relays, pub_kind, sub_kind):
    mine = relays.start(sub_kind, "a", subscribe=["fleet.>"])
    theirs = relays.start(pub_kind, "b", subscribe=["fleet.*"])
    result = relays.ok(theirs, "publish", topic="fleet.ping", data={"n": 1})
    assert (result["nodes"], result["endpoints"]) == (2, 2)
    for proc in (mine, theirs):
        line = proc.wait_event("message", timeout=10)
        assert (line["topic"], line["mid"], line["data"]) == ("fleet.ping", result["mid"], {"n": 1})


@pytest.mark.parametrize("pub_kind,sub_kind", [("node", "python"), ("python", "node")])
def test_retained_messages_both_ways(relays, pub_kind, sub_kind):
    pub = relays.start(pub_kind, "pub")
    first = relays.ok(pub, "publish", topic="config.flags", data={"v": 1}, retain=60000)
    latest = relays.ok(pub, "publish", topic="config.flags", data={"v": 2}, retain=60000)
    sub = relays.start(sub_kind, "sub", subscribe=["config.flags", "config.*"])
    line = sub.wait_event("message", timeout=10, pattern="config.flags")
    assert (line["data"], line["mid"], line["retained"]) == ({"v": 2}, latest["mid"], True)
    assert int(first["mid"]) < int(latest["mid"])
    assert _messages(sub, "config.*") == []  # a wildcard subscription gets no retained message
    retained = relays.ok(sub, "getRetained")
    assert [(r["topic"], r["mid"], json.loads(r["data"])) for r in retained] == [("config.flags", latest["mid"], {"v": 2})]
    assert relays.ok(sub, "deleteRetained", topic="config.flags") is True
    assert relays.ok(pub, "deleteRetained", topic="config.flags") is False
    late = relays.start(sub_kind, "late", subscribe=["config.flags"])
    relays.ok(pub, "publish", topic="config.flags", data={"v": 3})
    line = late.wait_event("message", timeout=10)
    assert (line["data"], line["retained"]) == ({"v": 3}, False)


@pytest.mark.parametrize("killed_kind,sweeper_kind", [("node", "python"), ("python", "node")])
def test_a_killed_node_is_swept_by_the_other_runtime(relays, killed_kind, sweeper_kind):
    victim = relays.start(killed_kind, "victim", subscribe=["work.>"], opts={"leaseDuration": 1000})
    sweeper = relays.start(sweeper_kind, "sweeper", opts={"leaseDuration": 5000, "sweepInterval": 200})
    assert relays.ok(sweeper, "publish", topic="work.a", data=1)["nodes"] == 1
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    line = sweeper.wait_event("swept", timeout=10)
    assert line["nodes"] == ["victim"]
    assert [n["id"] for n in relays.ok(sweeper, "getNodes")] == ["sweeper"]
    assert relays.ok(sweeper, "getCounts")["subscriptions"] == 0
    result = relays.ok(sweeper, "publish", topic="work.a", data=2)
    assert (result["nodes"], result["endpoints"]) == (0, 0)


def test_our_slow_node_drops_its_oldest_and_emits_lag(relays):
    """Our node's listener holds up its reader (a slow listener); Node publishes past our
    inbox_max_length: the oldest unread messages go, Node's getNodes counts them as
    dropped, our heartbeat reports the backlog as lag, and once the listener goes on it
    gets the newest ones."""
    slow = relays.start("python", "slow", subscribe=["load.>"], slow=True,
                        opts={"inboxMaxLength": 10, "lagThreshold": 5, "heartbeatInterval": 100})
    node = relays.start("node", "pub")
    relays.ok(node, "publish", topic="load.x", data={"i": "first"})
    slow.wait_event("message", timeout=10)  # the listener now blocks
    relays.ok(node, "publishMany", topic="load.x", count=50)
    lag = slow.wait_event("lag", timeout=10)
    assert 5 <= lag["backlog"] <= 10
    stats = {n["id"]: n for n in relays.ok(node, "getNodes")}
    assert stats["slow"]["dropped"] == 40
    relays.ok(slow, "release")
    slow.wait_for(lambda ln: ln.get("event") == "message" and ln["data"].get("i") == 49, timeout=10,
                  what="the newest message")
    assert [m["data"]["i"] for m in _messages(slow)] == ["first"] + list(range(40, 50))


def test_a_stopped_node_relay_loses_its_oldest_to_our_publishes(relays):
    """The other way round: Node's node is stopped (SIGSTOP) while our node publishes past
    its inboxMaxLength; our relayPublish trims its inbox and counts the drops, and once it
    runs again Node's node reads the newest ones."""
    theirs = relays.start("node", "paused", subscribe=["load.>"], opts={"inboxMaxLength": 10})
    ours = relays.start("python", "pub")
    theirs.proc.send_signal(signal.SIGSTOP)
    try:
        relays.ok(ours, "publishMany", topic="load.y", count=50)
        stats = {n["id"]: n for n in relays.ok(ours, "getNodes")}
        assert stats["paused"]["dropped"] == 40
    finally:
        theirs.proc.send_signal(signal.SIGCONT)
    theirs.wait_for(lambda ln: ln.get("event") == "message" and ln["data"]["i"] == 49, timeout=10,
                    what="the newest message")
    assert [m["data"]["i"] for m in _messages(theirs)] == list(range(40, 50))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_is_refused_alike_and_writes_nothing(relays, r, prefix, kind):
    proc = relays.start(kind, "n1", opts={"maxMessageSize": 64})
    before = {k: r.dump(k) for k in r.keys(f"{prefix}::relay:*")}
    cases = [("publish", {"topic": "", "data": 1}, -1), ("publish", {"topic": "a..b", "data": 1}, -1),
             ("publish", {"topic": "a.*", "data": 1}, -1), ("publish", {"topic": "a", "data": "x" * 100}, -4),
             ("subscribe", {"pattern": "a.>.b"}, -2), ("subscribe", {"pattern": ""}, -2),
             ("deleteRetained", {"topic": "a b"}, -1)]
    for op, fields, code in cases:
        line = relays.call(proc, op, **fields)
        assert not line["ok"] and line["name"] == "RelayError" and line["code"] == code, (op, fields, line)
    after = {k: r.dump(k) for k in r.keys(f"{prefix}::relay:*")}
    assert set(after) == set(before)
    # the records' heartbeats may move; the counter, the index and the inboxes may not
    for key in before:
        if key.endswith((":mid", ":subs", ":inbox", ":retained")):
            assert after[key] == before[key], key

"""Our ``Relay`` alone on a real Redis (the test process is not monkey-patched, so this is
also the unpatched mode: the inbox wait runs in a pool thread). Interop with Node's Relay
is in ``tests/interop/test_relay_interop.py``; these tests cover what needs a look inside:
draining on close, recovery after a lost lease, unsubscribing, the scripts' own refusals."""
from __future__ import annotations

import uuid

import gevent
import gevent.event
import pytest

from echomq_gevent import Relay
from echomq_gevent.relay import RelayClosedError, RelayError, encode_segment
from echomq_gevent.relay.backend import RelayBackend


@pytest.fixture
def namespace():
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def make(redis_url, prefix, namespace):
    made = []

    def build(node_id: str, **kw) -> Relay:
        relay = Relay(redis_url, namespace=namespace, node_id=node_id, prefix=prefix, block_timeout=1000, **kw)
        made.append(relay)
        relay.wait_until_ready(10)
        return relay

    yield build
    for relay in made:
        relay.close()


def wait(predicate, timeout=10.0, what="the condition"):
    with gevent.Timeout(timeout, AssertionError(f"timed out waiting for {what}")):
        while not predicate():
            gevent.sleep(0.01)


def test_publish_subscribe_and_unsubscribe(make):
    a, b = make("a"), make("b")
    got = []
    sub = b.subscribe("orders.*.paid", got.append)
    assert a.publish("orders.7.paid", {"sum": 3}).endpoints == 1
    wait(lambda: len(got) == 1, what="the message")
    assert (got[0].topic, got[0].data, got[0].retained) == ("orders.7.paid", {"sum": 3}, False)
    sub.unsubscribe()
    sub.unsubscribe()  # idempotent
    assert a.publish("orders.8.paid", 1)[1:] == (0, 0)
    assert a.get_counts()["subscriptions"] == 0


def test_close_delivers_the_batch_already_read_then_unregisters(make, r, prefix, namespace):
    a, b = make("a"), make("b")
    entered, release, got = gevent.event.Event(), gevent.event.Event(), []

    def slow(msg):
        got.append(msg.data)
        entered.set()
        release.wait()

    b.subscribe("x", slow)
    for i in range(3):
        a.publish("x", i)
    entered.wait(10)  # the reader holds a batch of 3 and sits in the first listener
    closer = gevent.spawn(b.close)
    gevent.sleep(0.05)
    release.set()
    closer.join(10)
    assert got == [0, 1, 2]  # the whole batch read before close was delivered
    base = f"{prefix}::relay:{{{namespace}}}"
    assert not r.exists(f"{base}:b:node", f"{base}:b:inbox")
    assert [n["id"] for n in a.get_nodes()] == ["a"]
    with pytest.raises(RelayClosedError):
        b.publish("x", 1)


def test_a_node_whose_lease_was_lost_recovers_its_subscriptions(make, r, prefix, namespace):
    a = make("a")
    b = make("b", lease_duration=3000, heartbeat_interval=100)
    recovered, got = gevent.event.Event(), []
    b.on("recovered", recovered.set)
    b.subscribe("news.>", lambda m: got.append(m.data))
    base = f"{prefix}::relay:{{{namespace}}}"
    r.delete(f"{base}:b:node")  # as if the lease had expired
    assert a.publish("news.x", 1).nodes == 0  # unroutable meanwhile
    assert recovered.wait(10)
    assert a.publish("news.x", 2).nodes == 1
    wait(lambda: got == [2], what="the message after recovery")


def test_inbox_overflow_is_dropped_and_lag_emitted(make):
    a = make("a")
    b = make("b", inbox_max_length=5, lag_threshold=3, heartbeat_interval=100)
    release, lags, got = gevent.event.Event(), [], []
    b.on("lag", lags.append)
    b.subscribe("q", lambda m: (got.append(m.data), release.wait()))
    a.publish("q", "first")
    wait(lambda: got == ["first"], what="the first message")
    for i in range(20):
        a.publish("q", i)
    wait(lambda: lags, what="a lag event")
    assert 3 <= lags[0] <= 5
    assert {n["id"]: n["dropped"] for n in a.get_nodes()}["b"] == 15
    release.set()
    wait(lambda: got[-1:] == [19], what="the newest message")
    assert got == ["first", 15, 16, 17, 18, 19]


def test_the_scripts_refuse_bad_input_and_write_nothing(make, r, prefix, namespace):
    """The Python checks are not the only guard: called directly, the scripts refuse too."""
    a = make("a", max_message_size=16)
    backend: RelayBackend = a.backend
    before = {k: r.dump(k) for k in r.keys(f"{prefix}::relay:{{{namespace}}}:*") if not k.endswith((":nodes", ":node"))}
    for call, code in [(lambda: backend.publish("", "1", 0, 0, 16, 10), -1),
                       (lambda: backend.publish("a.*", "1", 0, 0, 16, 10), -1),
                       (lambda: backend.publish("a", '"' + "x" * 20 + '"', 0, 0, 16, 10), -4),
                       (lambda: backend.subscribe("a", "e1", "a.>.b"), -2),
                       (lambda: backend.subscribe("a", "e 1", "a"), -5),
                       (lambda: backend.subscribe("ghost", "e1", "a"), -3),
                       (lambda: backend.delete_retained("a b"), -1)]:
        with pytest.raises(RelayError) as caught:
            call()
        assert caught.value.code == code
    after = {k: r.dump(k) for k in r.keys(f"{prefix}::relay:{{{namespace}}}:*") if not k.endswith((":nodes", ":node"))}
    assert after == before


def test_option_and_input_checks(redis_url, make):
    for bad in ({"namespace": "a b"}, {"node_id": "x" * 65}, {"lease_duration": 0},
                {"inbox_max_length": 5, "lag_threshold": 6}, {"block_timeout": 1.5}):
        with pytest.raises((ValueError, RelayError)):
            Relay(redis_url, autorun=False, **bad)
    a = make("a")
    with pytest.raises(ValueError, match="JSON"):
        a.publish("t", {1, 2})
    with pytest.raises(ValueError, match="retain"):
        a.publish("t", 1, retain=-1)
    with pytest.raises(RelayError, match="Message data is too large"):
        a.publish("t", "x" * (512 * 1024))
    with pytest.raises(ValueError):
        a.get_nodes(-1)
    assert encode_segment("a.b c~") == "a%2Eb%20c%7E"
    assert a.publish(encode_segment("user@example.com"), 1).nodes == 0


def test_close_from_a_listener_and_a_lone_surrogate_in_data(make):
    a, b = make("a"), make("b")
    got = []

    def listener(msg):
        got.append(msg.data)
        b.close()  # on the reader greenlet itself

    b.subscribe("bye", listener)
    a.publish("bye", {"s": "lone \ud800 surrogate", "e": "é"})
    wait(lambda: b.closing and [n["id"] for n in a.get_nodes()] == ["a"], what="b closed and gone")
    assert got == [{"s": "lone \ud800 surrogate", "e": "é"}]

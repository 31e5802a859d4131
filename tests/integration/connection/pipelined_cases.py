"""Cases of the pipelined script connection (``echomq_gevent.connection.pipelined``). They need
monkey-patched sockets, so ``test_pipelined_connection.py`` runs this file in a patched
subprocess; it is not collected on its own (its name does not start with ``test_``)."""
from __future__ import annotations

import gc
import weakref

import gevent
import gevent.monkey
import pytest
import redis

from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.connection.kept import AmbiguousCallError, KeptConnection
from echomq_gevent.connection import pipelined
from echomq_gevent.connection.pipelined import PipelinedConnection
from echomq_gevent.protocol.scripts import Scripts

assert gevent.monkey.is_module_patched("socket"), "run by test_pipelined_connection.py, under patch_all()"

# Counts its runs in KEYS[1]; on the first run keeps Redis busy for ARGV[1] ms; returns ARGV[2].
_SLOW_FIRST = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  local t = redis.call('TIME')
  local start = t[1] * 1000000 + t[2]
  repeat
    t = redis.call('TIME')
  until (t[1] * 1000000 + t[2]) - start > tonumber(ARGV[1]) * 1000
end
return ARGV[2]
"""
_ECHO = "return ARGV[1]"
_PUSH = "return redis.call('RPUSH', KEYS[1], ARGV[1])"


def _client(redis_url: str, **kw) -> redis.Redis:
    kw.setdefault("decode_responses", True)
    return redis.Redis.from_url(redis_url, **kw)


@pytest.fixture
def make_pipe(redis_url):
    made = []

    def make(window=pipelined.WINDOW, quiet=pipelined.QUIET_S, burst=pipelined.BURST, **kw):
        client = _client(redis_url, **kw)
        kept = KeptConnection.for_client(client)
        assert kept is not None
        pipe = PipelinedConnection(kept, window=window, quiet=quiet, burst=burst)
        made.append((client, pipe))
        return pipe

    yield make
    for client, pipe in made:
        pipe.release()
        client.close()


def _created(pipe: PipelinedConnection) -> int:
    return pipe.client.connection_pool._created_connections


def _wait_until(predicate, what: str, limit: int = 20000) -> None:
    for _ in range(limit):
        if predicate():
            return
        gevent.sleep(0.001)
    raise AssertionError(f"never: {what}")


def test_scripts_use_the_pipelined_connection_on_their_thread(redis_url, prefix, qname):
    client = _client(redis_url)
    try:
        scripts = Scripts(client, QueueKeys(qname, prefix))
        assert scripts.pipelined
        results = {}

        def caller(i):
            results[i] = [scripts.get_counts(["wait"]) for _ in range(5)]

        gevent.joinall([gevent.spawn(caller, i) for i in range(50)], raise_error=True)
        assert all(v == [[0]] * 5 for v in results.values()) and len(results) == 50
        assert scripts._pipe is not None and scripts._pipe.max_in_flight > 1
        scripts.release_connections()
        pool = client.connection_pool
        assert len(pool._in_use_connections) == 0
    finally:
        client.close()


def test_answers_reach_their_callers_with_many_in_flight(make_pipe):
    pipe = make_pipe()
    got = {}

    def caller(i):
        got[i] = [pipe.call("EVAL", _ECHO, 0, f"{i}:{k}", resend=False) for k in range(20)]

    gevent.joinall([gevent.spawn(caller, i) for i in range(100)], raise_error=True)
    assert got == {i: [f"{i}:{k}" for k in range(20)] for i in range(100)}
    assert pipe.max_in_flight > 1 and pipe.writes < pipe.requests
    assert _created(pipe) == 1  # all on one connection


#: a script that keeps Redis busy for ARGV[1] ms (and so keeps its caller waiting to read)
_BUSY_MS = ("local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; "
            "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > tonumber(ARGV[1]) * 1000; return 1")


def test_the_socket_timeout_bounds_each_wait_not_the_waits_of_a_connection_in_all(make_pipe):
    """15 answers of 50 ms each on one connection whose timeout is 0.2 s: 0.75 s of waiting
    in all, each wait far under the timeout. The read timer went on from the time left at
    its last stop, so the 4th wait timed out at once and failed every call in flight (at a
    1e6-job backlog, bursts of a hundred every 10 s of busy reading); a wait that really
    lasts longer than the timeout still times out."""
    pipe = make_pipe(socket_timeout=0.2)
    assert pipe.call("PING") in (b"PONG", "PONG", True)
    wire = pipe._link.wire
    assert wire is not None
    for _ in range(15):
        assert pipe.call("EVAL", _BUSY_MS, 0, "50", resend=False) == 1
    assert pipe._link.wire is wire  # never reconnected
    with pytest.raises(Exception, match="Timeout reading from socket"):
        pipe.call("EVAL", _BUSY_MS, 0, "400", resend=False)


def test_batches_written_while_answers_are_outstanding_run_in_call_order(make_pipe, r, prefix):
    pipe = make_pipe(window=None)  # many writes in flight at once
    slow, log = f"{prefix}:slow", f"{prefix}:log"
    order = []

    def push(i):
        order.append(i)
        return pipe.call("EVAL", _PUSH, 1, log, str(i), resend=False)

    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "200", "slow", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    waves = []
    for wave in range(5):  # five hub turns, each writes its calls while the slow one runs
        waves += [gevent.spawn(push, wave * 10 + i) for i in range(10)]
        _wait_until(lambda: pipe.in_flight >= 1 + 10 * (wave + 1), f"wave {wave} is written")
    assert first.get() == "slow"
    gevent.joinall(waves, raise_error=True)
    assert pipe.writes >= 6 and pipe.max_in_flight >= 51
    assert [int(x) for x in r.lrange(log, 0, -1)] == order
    assert sorted(g.value for g in waves) == list(range(1, 51))


def test_a_death_with_several_batches_outstanding_replays_nothing_unsafe(make_pipe, r, prefix):
    pipe = make_pipe(window=None, socket_timeout=0.25)
    slow = f"{prefix}:slow"
    outcome = {}

    def unsafe(i):
        key = f"{prefix}:n{i}"
        try:
            outcome[i] = pipe.call("INCR", key, resend=False)
        except AmbiguousCallError as exc:
            outcome[i] = exc

    def safe(i):
        outcome[f"safe{i}"] = pipe.call("EVAL", _ECHO, 0, f"s{i}", resend=True)

    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "400", "x", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    callers = []
    for wave in range(3):  # three more writes behind the slow call
        callers += [gevent.spawn(unsafe, wave * 4 + i) for i in range(4)] + [gevent.spawn(safe, wave)]
        _wait_until(lambda: pipe.in_flight >= 1 + 5 * (wave + 1), f"wave {wave} is written")
    with pytest.raises(AmbiguousCallError, match="may have run"):
        first.get()
    gevent.joinall(callers, raise_error=True)
    for i in range(12):
        assert isinstance(outcome[i], AmbiguousCallError), outcome[i]
        assert outcome[i].commands == [("INCR", f"{prefix}:n{i}")]
    assert [outcome[f"safe{w}"] for w in range(3)] == ["s0", "s1", "s2"]  # re-run through the client
    _wait_until(lambda: r.get(slow) is not None, "the slow script's run is visible")
    assert r.get(slow) == "1"  # ran once, never sent again
    # each unsafe call ran at most once (Redis may have run what it had read before the close)
    assert all(r.get(f"{prefix}:n{i}") in (None, "1") for i in range(12))
    assert pipe.call("EVAL", _ECHO, 0, "after", resend=False) == "after"  # a new connection
    assert pipe.in_flight == 0


def test_a_killed_caller_leaves_the_connection_and_the_others_alone(make_pipe, r, prefix):
    pipe = make_pipe()
    slow = f"{prefix}:slow"
    victim = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "150", "lost", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    others = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"o{i}", resend=False) for i in range(5)]
    _wait_until(lambda: pipe.in_flight == 6, "the other calls are written")
    victim.kill()  # the lone caller reading its own answer, killed mid-wait
    assert victim.dead and isinstance(victim.value, gevent.GreenletExit)
    assert [g.get() for g in others] == [f"o{i}" for i in range(5)]
    assert r.get(slow) == "1"
    assert pipe.call("EVAL", _ECHO, 0, "next", resend=False) == "next"  # the lost answer was read and dropped
    assert _created(pipe) == 1


def test_a_call_that_cannot_be_packed_fails_alone_and_unsent(make_pipe, r, prefix):
    """A str holding a lone surrogate cannot be encoded as UTF-8: its caller gets that
    error, nothing of it is written, and the calls around it (written in the same send,
    or in flight before it) are answered on the same connection, none of them ambiguous."""
    pipe = make_pipe()
    slow, bad = f"{prefix}:slow", f"{prefix}:bad"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "100", "first", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    before = gevent.spawn(pipe.call, "EVAL", _ECHO, 0, "before", resend=False)
    victim = gevent.spawn(pipe.call, "SET", bad, "x\ud800y", resend=False)
    after = gevent.spawn(pipe.call, "EVAL", _ECHO, 0, "after", resend=False)
    assert first.get() == "first" and before.get() == "before" and after.get() == "after"
    with pytest.raises(UnicodeEncodeError):
        victim.get()
    assert r.exists(bad) == 0
    lone = gevent.spawn(pipe.call, "SET", bad, "\udcff", resend=True)  # alone in its turn, resend-safe
    with pytest.raises(UnicodeEncodeError):
        lone.get()
    assert pipe.call("EVAL", _ECHO, 0, "next", resend=False) == "next"
    assert _created(pipe) == 1 and r.exists(bad) == 0


def test_a_worker_ends_jobs_whose_text_holds_lone_surrogates_once(redis_url, prefix, qname):
    """A processor's return value, failure message and log line holding a lone surrogate
    (text decoded with ``surrogateescape``) are written with the surrogate escaped, as
    Node's JSON.stringify writes one: each job ends once, the worker goes on."""
    import json as _json

    from echomq_gevent import Queue, Worker

    queue = Queue(qname, connection=redis_url, prefix=prefix)
    runs = []

    def processor(job):
        runs.append(job.id)
        job.log("line \udcff")
        if job.data["i"] % 2:
            raise ValueError("bad name \udcff")
        return {"name": "x\ud800y"}

    worker = Worker(qname, processor, connection=redis_url, prefix=prefix, concurrency=4)
    try:
        jobs = queue.add_bulk([{"name": "n", "data": {"i": i}} for i in range(10)])
        worker.start()
        _wait_until(lambda: sum(queue.get_job_counts("completed", "failed").values()) == 10, "10 jobs ended")
        assert sorted(runs) == sorted(j.id for j in jobs)  # each ran once
        raw = queue.client
        for job in jobs:
            fields = raw.hgetall(f"{prefix}:{qname}:{job.id}")
            if int(job.data["i"]) % 2:
                assert fields["failedReason"] == "bad name \\udcff"
                assert "bad name \\udcff" in _json.loads(fields["stacktrace"])[0]
            else:
                assert fields["returnvalue"] == '{"name":"x\\ud800y"}'
                assert _json.loads(fields["returnvalue"]) == {"name": "x\ud800y"}
            assert raw.lrange(f"{prefix}:{qname}:{job.id}:logs", 0, -1) == ["line \\udcff"]
        assert worker.counters["completed"] == 5 and worker.counters["failed"] == 5
    finally:
        worker.close()
        queue.close()


def test_a_worker_fails_a_job_holding_bytes_that_are_not_utf8_once(redis_url, prefix, qname, r):
    """On the pipelined connection too: the answer that brings a job hash holding bytes
    that are not UTF-8 is read whole, that job fails once naming its field, the others run."""
    from echomq_gevent import Queue, Worker

    queue = Queue(qname, connection=redis_url, prefix=prefix)
    queue.pause()
    jobs = [queue.add("n", {"i": i}) for i in range(6)]
    binary = redis.Redis.from_url(redis_url)
    binary.hset(f"{prefix}:{qname}:{jobs[2].id}", "data", b'{"i":"\xff"}')
    binary.close()
    ran = []
    worker = Worker(qname, lambda job: ran.append(job.id), connection=redis_url, prefix=prefix, concurrency=2)
    try:
        worker.start()
        queue.resume()
        _wait_until(lambda: sum(queue.get_job_counts("completed", "failed").values()) == 6, "6 jobs ended")
        assert sorted(ran) == sorted(j.id for j in jobs if j is not jobs[2])
        assert "field 'data'" in r.hget(f"{prefix}:{qname}:{jobs[2].id}", "failedReason")
        assert queue.get_job_counts("failed", "active") == {"failed": 1, "active": 0}
    finally:
        worker.close()
        queue.close()


def test_a_killed_waiter_behind_others_drops_only_its_answer(make_pipe, prefix):
    pipe = make_pipe()
    slow = f"{prefix}:slow"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "150", "first", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    calls = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"c{i}", resend=False) for i in range(6)]
    _wait_until(lambda: pipe.in_flight == 7, "the calls are written")
    calls[2].kill()
    calls[4].kill()
    assert first.get() == "first"
    assert [calls[i].get() for i in (0, 1, 3, 5)] == ["c0", "c1", "c3", "c5"]
    assert pipe.call("EVAL", _ECHO, 0, "next", resend=False) == "next"
    assert _created(pipe) == 1


def test_a_caller_killed_before_its_call_is_written_never_sends_it(make_pipe, r, prefix):
    pipe = make_pipe()
    big_key, key, other = f"{prefix}:big", f"{prefix}:never", f"{prefix}:other"
    # a write big enough to fill the socket's buffers: its sender waits, later calls queue
    big = gevent.spawn(pipe.call, "SET", big_key, "x" * (64 << 20), resend=False)
    _wait_until(lambda: pipe._writing, "the big write is under way")
    victim = gevent.spawn(pipe.call, "INCR", key, resend=False)
    bystander = gevent.spawn(pipe.call, "INCR", other, resend=False)
    _wait_until(lambda: len(pipe._queue) == 2, "both calls are queued behind the big write")
    victim.kill()
    assert big.get() == "OK" and bystander.get() == 1
    assert r.get(key) is None  # never written
    assert r.delete(big_key) == 1


def test_with_few_calls_in_flight_the_first_of_a_turn_goes_at_once_and_the_rest_at_its_end(make_pipe, prefix):
    pipe = make_pipe()
    slow = f"{prefix}:slow"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "200", "slow", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    # ten greenlets that run in one hub turn: the first call is written as it is made,
    # the other nine together when the turn is over, all while the slow call still runs
    written = []
    real_send = pipe._send

    def recording_send(batch):
        written.append(len(batch))
        real_send(batch)

    pipe._send = recording_send
    calls = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"c{i}", resend=False) for i in range(10)]
    _wait_until(lambda: pipe.in_flight == 11, "every call is written while the slow one runs")
    assert written == [1, 9] and not first.ready()
    # later turns again: one call alone in its turn is written at once
    late = gevent.spawn(pipe.call, "EVAL", _ECHO, 0, "late", resend=False)
    _wait_until(lambda: pipe.in_flight == 12, "a call of a later turn is written")
    assert written == [1, 9, 1] and not first.ready()
    assert first.get() == "slow"
    assert [g.get() for g in calls] == [f"c{i}" for i in range(10)] and late.get() == "late"


def test_every_turn_writes_while_earlier_writes_await_their_answers(make_pipe, prefix):
    pipe = make_pipe(window=None)  # many writes in flight at once
    slow = f"{prefix}:slow"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "300", "slow", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    turns = []
    for size, total in ((1, 2), (10, 12), (40, 52)):  # three hub turns of callers, written while the slow call runs
        turns.append([gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"{size}:{i}", resend=False)
                      for i in range(size)])
        _wait_until(lambda: pipe.in_flight == total, "the turn's calls are written")
    assert pipe.in_flight == 52 and not first.ready() and not pipe._queue
    assert first.get() == "slow"
    for size, greenlets in zip((1, 10, 40), turns):
        assert [g.get() for g in greenlets] == [f"{size}:{i}" for i in range(size)]
    # the slow call, then per turn its first call alone and the rest together (none for a turn of 1)
    assert pipe.writes == 1 + 1 + 2 + 2 and pipe.requests == 52 and _created(pipe) == 1
    assert pipe.max_in_flight == 52


def _one_turn_of_callers(pipe, tag, size=10):
    """``size`` greenlets whose calls are made in one hub turn (the first is written at
    once, the rest at the end of the turn, by the writer); their answers."""
    if pipe._link is None:  # connect first: the first call's write would take the turn's calls, connecting
        assert pipe.call("PING") == "PONG"
    callers = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"{tag}:{i}", resend=False) for i in range(size)]
    return [g.get() for g in callers]


def test_one_writer_greenlet_writes_turn_after_turn(make_pipe):
    pipe = make_pipe(window=None)
    assert _one_turn_of_callers(pipe, "first") == [f"first:{i}" for i in range(10)]
    writer, before = pipe._writer_parked, pipe.writes
    assert writer is not None and not writer.dead
    for turn in range(30):
        assert _one_turn_of_callers(pipe, turn) == [f"{turn}:{i}" for i in range(10)]
        assert pipe._writer_parked is writer and not pipe._writing
    # each turn: its first call alone, the other nine together by the same writer
    assert pipe.writes - before == 60


def test_a_killed_writer_is_replaced_and_nothing_waits(make_pipe):
    pipe = make_pipe(window=None)
    hub = gevent.get_hub()
    assert _one_turn_of_callers(pipe, "a") == [f"a:{i}" for i in range(10)]
    parked = pipe._writer_parked
    hub.loop.run_callback(parked.throw)  # killed while parked
    gevent.sleep(0)
    assert parked.dead and pipe._writer_parked is None and not pipe._writing
    assert _one_turn_of_callers(pipe, "b") == [f"b:{i}" for i in range(10)]
    second = pipe._writer_parked
    assert second is not None and second is not parked
    # killed once it was handed a write, before it ran (the switch to it still pending,
    # as when the hand comes from outside the hub): a new writer does the write
    real_hand = pipe._hand_to_writer

    def hand_then_kill():
        pipe._hand_to_writer = real_hand
        writer = pipe._writer_parked
        pipe._writing, pipe._writer_parked = True, None
        hub.loop.run_callback(writer.switch)
        writer.throw()

    pipe._hand_to_writer = hand_then_kill
    assert _one_turn_of_callers(pipe, "c") == [f"c:{i}" for i in range(10)]
    third = pipe._writer_parked
    assert second.dead and third is not None and third is not second and not third.dead


def test_a_connection_nobody_holds_is_collected_with_its_writer(redis_url):
    client = _client(redis_url)
    try:
        pipe = PipelinedConnection(KeptConnection.for_client(client), window=None)
        assert _one_turn_of_callers(pipe, "x") == [f"x:{i}" for i in range(10)]
        writer = weakref.ref(pipe._writer_parked)
        gone = weakref.ref(pipe)
        pipe.release()
        del pipe
        gc.collect()
        gevent.sleep(0)
        assert gone() is None, "the parked writer keeps its connection alive"
        assert writer() is None, "the parked writer outlives its connection"
    finally:
        client.close()


def _incr_into(pipe, prefix, outcome):
    """A caller that increments ``<prefix>:<name>`` (never sent again) and records the count,
    or the AmbiguousCallError, under ``name``."""
    def incr(name):
        try:
            outcome[name] = pipe.call("INCR", f"{prefix}:{name}", resend=False)
        except AmbiguousCallError as exc:
            outcome[name] = exc
    return incr


def test_a_death_sends_the_calls_not_yet_written_on_a_new_connection_once(make_pipe, r, prefix):
    pipe = make_pipe(window=None)  # many writes in flight at once
    slow = f"{prefix}:slow"
    outcome = {}
    incr = _incr_into(pipe, prefix, outcome)
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "400", "x", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    written = [gevent.spawn(incr, f"w{i}") for i in range(40)]
    _wait_until(lambda: pipe.in_flight == 41, "40 more calls are written")
    # one hub turn: q0 is written at once and q1..q39 wait for the turn's end, but the
    # connection is found dead first (what a read or write that fails does)
    queued = [gevent.spawn(incr, f"q{i}") for i in range(40)]
    gevent.spawn(lambda: pipe._kill(pipe._link, redis.ConnectionError("the connection was lost")))
    with pytest.raises(AmbiguousCallError):
        first.get()
    gevent.joinall(written + queued, raise_error=True)
    assert all(isinstance(outcome[f"w{i}"], AmbiguousCallError) for i in range(40))
    assert isinstance(outcome["q0"], AmbiguousCallError)
    assert [outcome[f"q{i}"] for i in range(1, 40)] == [1] * 39  # never written before: sent once
    assert [r.get(f"{prefix}:q{i}") for i in range(1, 40)] == ["1"] * 39
    assert all(r.get(f"{prefix}:w{i}") in (None, "1") for i in range(40))


def test_a_connection_that_cannot_be_made_is_not_ambiguous(redis_url):
    from redis_server import free_port

    client = redis.Redis(port=free_port(), decode_responses=True, socket_connect_timeout=0.5)
    try:
        kept = KeptConnection.for_client(client)
        pipe = PipelinedConnection(kept)
        with pytest.raises(redis.ConnectionError) as info:
            pipe.call("INCR", "k", resend=False)
        assert not isinstance(info.value, AmbiguousCallError)
        results = []

        def caller():
            try:
                pipe.call("INCR", "k", resend=False)
            except redis.ConnectionError as exc:
                results.append(exc)

        gevent.joinall([gevent.spawn(caller) for _ in range(5)])
        assert len(results) == 5 and not any(isinstance(e, AmbiguousCallError) for e in results)
    finally:
        client.close()


def test_noscript_with_many_in_flight_reloads_and_answers_everyone(redis_url, r, prefix, qname):
    client = _client(redis_url)
    try:
        scripts = Scripts(client, QueueKeys(qname, prefix))
        scripts.get_counts(["wait"])
        r.script_flush()
        results = []
        gevent.joinall([gevent.spawn(lambda: results.append(scripts.get_counts(["wait", "active"])))
                        for _ in range(30)], raise_error=True)
        assert results == [[0, 0]] * 30
        scripts.release_connections()
    finally:
        client.close()


def test_release_waits_for_answers_in_flight(make_pipe, prefix):
    pipe = make_pipe()
    slow = f"{prefix}:slow"
    g = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "100", "done", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    pool = pipe.client.connection_pool
    pipe.release()
    assert len(pool._in_use_connections) == 1  # still reading
    assert g.get() == "done"
    _wait_until(lambda: len(pool._in_use_connections) == 0, "the connection is back in the pool")
    assert pipe.call("EVAL", _ECHO, 0, "again", resend=False) == "again"


def test_a_worker_finishes_everything_with_many_in_flight(redis_url, prefix, qname):
    from echomq_gevent import Queue, Worker

    queue = Queue(qname, connection=redis_url, prefix=prefix)
    done = []
    worker = Worker(qname, lambda job: done.append(job.id) or job.data["i"], connection=redis_url, prefix=prefix,
                    concurrency=50)
    try:
        queue.add_bulk([{"name": "n", "data": {"i": i}} for i in range(600)])
        worker.start()
        _wait_until(lambda: queue.get_job_counts("completed")["completed"] == 600, "600 jobs completed")
        assert len(set(done)) == 600
        assert worker.scripts.pipelined and worker.scripts._pipe.max_in_flight > 1
    finally:
        worker.close()
        queue.close()


def test_a_scheduler_run_due_alone_costs_two_sends_its_pickup_then_its_next_run_with_its_finish(redis_url, prefix,
                                                                                                qname, r):
    """A run due alone: the pick-up, then one send with its next run and its finish (the next
    run's call waits for the end of the hub turn, in which the run's no-op processor ends);
    and at 20 slots or more, where finishes are gathered, a lone finish spawns no greenlet
    to gather the others."""
    import time

    from echomq_gevent import Queue, Worker
    from echomq_gevent.protocol.library import library

    for name in ("moveToActiveMany-11", "updateJobScheduler-12", "moveToFinished-14"):
        r.script_load(library().sources[name])  # no NOSCRIPT round trip in the sends counted
    queue = Queue(qname, connection=redis_url, prefix=prefix)
    worker = Worker(qname, lambda job: None, connection=redis_url, prefix=prefix, concurrency=50, drain_delay=5)
    flushes = []
    batcher = worker._settler.batcher
    real_flush = batcher._flush
    batcher._flush = lambda: flushes.append(1) or real_flush()
    try:
        worker.start()
        _wait_until(lambda: worker._fetch.last_fetch_at is not None and worker._fetch.marker.pending,
                    "the idle worker waiting on its marker")
        sends = []
        pipe = worker.scripts._pipe
        real_send = pipe._send

        def recording_send(batch):
            sends.append([req.commands[0][1] for req in batch])
            real_send(batch)

        pipe._send = recording_send
        queue.upsert_job_scheduler("alone", {"every": 3_600_000, "startDate": int(time.time() * 1000) + 300},
                                   {"name": "alone"})
        _wait_until(lambda: r.zcard(queue.keys.completed) == 1 and r.zcard(queue.keys.delayed) == 1,
                    "the run completed and its next run made")
        gevent.sleep(0.1)
        shas = library().shas
        # the pick-up that took the run; then its next run with its finish, in one send
        assert sends[-2:] == [[shas["moveToActiveMany-11"]],
                              [shas["updateJobScheduler-12"], shas["moveToFinished-14"]]], sends
        assert all(sha == shas["moveToActiveMany-11"] for sent in sends[:-2] for sha in sent), sends
        assert flushes == []
    finally:
        worker.close()
        queue.close()


# --------------------------------------------------------------------------- the window of a burst
def _quiet_pipe(make_pipe, **kw):
    """A pipe whose connection exists and has been idle longer than its ``quiet``."""
    pipe = make_pipe(**kw)
    assert pipe.call("PING") in (True, "PONG")
    gevent.sleep(0.02)
    return pipe


def _record_sends(pipe):
    sizes = []
    real_send = pipe._send

    def recording_send(batch):
        sizes.append(sum(len(req.commands) for req in batch))
        real_send(batch)

    pipe._send = recording_send
    return sizes


def test_a_burst_after_a_quiet_moment_goes_through_the_window_in_call_order(make_pipe, r, prefix):
    pipe = _quiet_pipe(make_pipe, window=4)
    slow, log = f"{prefix}:slow", f"{prefix}:log"
    sizes = _record_sends(pipe)
    order = []

    def push(i):
        order.append(i)
        return pipe.call("EVAL", _PUSH, 1, log, str(i), resend=False)

    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "200", "slow", resend=False)
    pushes = [gevent.spawn(push, i) for i in range(20)]  # the same hub turn as the slow call
    _wait_until(lambda: len(order) == 20 and not pipe._writing, "every call is made")
    gevent.sleep(0.02)
    # while Redis runs the slow call: the window is full, the other 17 calls wait here
    assert pipe.in_flight == 4 and len(pipe._queue) == 17 and not first.ready()
    assert first.get() == "slow"
    gevent.joinall(pushes, raise_error=True)
    assert sorted(g.value for g in pushes) == list(range(1, 21))
    assert [int(x) for x in r.lrange(log, 0, -1)] == order  # Redis ran them in call order
    assert pipe.max_in_flight == 4 and max(sizes) <= 4 and sum(sizes) == 21
    assert pipe.bursts == 1 and _created(pipe) == 1


def test_without_a_quiet_moment_every_turn_goes_at_once(make_pipe, prefix):
    pipe = _quiet_pipe(make_pipe, window=4, quiet=3600.0)  # never quiet long enough
    slow = f"{prefix}:slow"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "200", "slow", resend=False)
    calls = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"c{i}", resend=False) for i in range(20)]
    _wait_until(lambda: pipe.in_flight == 21, "every call is written while the slow one runs")
    assert not first.ready() and not pipe._queue
    assert first.get() == "slow" and [g.get() for g in calls] == [f"c{i}" for i in range(20)]
    assert pipe.bursts == 0


def test_a_burst_longer_than_its_limit_goes_at_once_past_it(make_pipe, prefix):
    pipe = _quiet_pipe(make_pipe, window=4, burst=6)
    slow = f"{prefix}:slow"
    sizes = _record_sends(pipe)
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "100", "slow", resend=False)
    calls = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"c{i}", resend=False) for i in range(30)]
    _wait_until(lambda: pipe.in_flight == 4, "the window is full")
    assert first.get() == "slow"
    assert [g.get() for g in calls] == [f"c{i}" for i in range(30)]
    # the burst: 4, then refills up to 6 requests; what waited then goes in one write
    assert sizes[0] == 1 and sum(sizes[:2]) == 4 and max(sizes) >= 20, sizes
    assert pipe.bursts == 1


def test_a_lone_caller_reading_its_own_answer_writes_what_waits_behind_the_window(make_pipe, prefix):
    pipe = _quiet_pipe(make_pipe, window=2)
    slow = f"{prefix}:slow"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "100", "slow", resend=False)
    _wait_until(lambda: pipe.in_flight == 1, "the slow call is written")
    assert pipe._link.reader is first  # it reads its own answer: no reader greenlet
    calls = [gevent.spawn(pipe.call, "EVAL", _ECHO, 0, f"c{i}", resend=False) for i in range(5)]
    _wait_until(lambda: len(pipe._queue) == 4, "one call is written, four wait")
    assert first.get() == "slow"
    assert [g.get() for g in calls] == [f"c{i}" for i in range(5)]
    assert pipe.max_in_flight == 2 and pipe.in_flight == 0 and not pipe._queue


def test_a_death_sends_the_calls_waiting_behind_the_window_once_on_a_new_connection(make_pipe, r, prefix):
    pipe = _quiet_pipe(make_pipe, window=4)
    slow = f"{prefix}:slow"
    outcome = {}
    incr = _incr_into(pipe, prefix, outcome)
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "300", "x", resend=False)
    callers = [gevent.spawn(incr, f"n{i}") for i in range(10)]
    _wait_until(lambda: pipe.in_flight == 4 and len(pipe._queue) == 7, "3 calls are written, 7 wait")
    gevent.spawn(lambda: pipe._kill(pipe._link, redis.ConnectionError("the connection was lost")))
    with pytest.raises(AmbiguousCallError):
        first.get()
    gevent.joinall(callers, raise_error=True)
    assert all(isinstance(outcome[f"n{i}"], AmbiguousCallError) for i in range(3))  # written: may have run
    assert [outcome[f"n{i}"] for i in range(3, 10)] == [1] * 7  # never written before: sent once
    assert [r.get(f"{prefix}:n{i}") for i in range(3, 10)] == ["1"] * 7
    assert all(r.get(f"{prefix}:n{i}") in (None, "1") for i in range(3))


def test_a_caller_killed_while_waiting_behind_the_window_never_sends_its_call(make_pipe, r, prefix):
    pipe = _quiet_pipe(make_pipe, window=4)
    slow = f"{prefix}:slow"
    first = gevent.spawn(pipe.call, "EVAL", _SLOW_FIRST, 1, slow, "150", "x", resend=False)
    callers = [gevent.spawn(pipe.call, "INCR", f"{prefix}:n{i}", resend=False) for i in range(8)]
    _wait_until(lambda: pipe.in_flight == 4 and len(pipe._queue) == 5, "3 calls are written, 5 wait")
    callers[5].kill()
    assert first.get() == "x"
    assert [callers[i].get() for i in (0, 1, 2, 3, 4, 6, 7)] == [1] * 7
    assert r.get(f"{prefix}:n5") is None  # never written
    assert pipe.call("INCR", f"{prefix}:after", resend=False) == 1 and _created(pipe) == 1


def test_a_worker_with_jobs_ending_in_waves_finishes_each_once(redis_url, prefix, qname, r):
    from echomq_gevent import Queue, Worker

    queue = Queue(qname, connection=redis_url, prefix=prefix)
    runs = []

    def sleeper(job):
        runs.append(job.id)
        gevent.sleep(0.005)
        return job.data["i"]

    worker = Worker(qname, sleeper, connection=redis_url, prefix=prefix, concurrency=50)
    try:
        queue.add_bulk([{"name": "n", "data": {"i": i}} for i in range(1500)])
        worker.start()
        _wait_until(lambda: queue.get_job_counts("completed")["completed"] == 1500, "1,500 jobs completed")
        assert len(runs) == 1500 and len(set(runs)) == 1500
        pipe = worker.scripts._pipe
        assert worker.scripts.pipelined and pipe.bursts > 0  # the waves went through the window
        assert queue.get_job_counts("active", "wait", "failed") == {"active": 0, "wait": 0, "failed": 0}
    finally:
        worker.close()
        queue.close()


# --------------------------------------------------------------------------- the raw wire
def test_calls_move_on_the_raw_wire_of_a_plain_socket(make_pipe, prefix):
    from echomq_gevent.connection.wire import Wire

    pipe = make_pipe()
    assert pipe.call("SET", f"{prefix}:k", "v") == "OK" and pipe.call("GET", f"{prefix}:k") == "v"
    assert isinstance(pipe._link.wire, Wire) and pipe._link.wire.serves(pipe._link.conn)


def test_the_wire_reads_replies_and_errors_as_redis_py_does(make_pipe, prefix):
    pipe = make_pipe()
    big = "x" * 300_000  # over the read buffer and over one send
    assert pipe.call("SET", f"{prefix}:big", big) == "OK"
    assert pipe.call("GET", f"{prefix}:big") == big
    answers = pipe.call_many([("GET", f"{prefix}:big"), ("EVALSHA", "0" * 40, 0), ("INCR", f"{prefix}:big"),
                              ("LRANGE", f"{prefix}:none", 0, -1), ("GET", f"{prefix}:none")])
    assert answers[0] == big
    assert isinstance(answers[1], redis.exceptions.NoScriptError)  # the class redis-py gives it
    assert type(answers[2]) is redis.ResponseError and "not an integer" in str(answers[2])
    assert answers[3:] == [[], None]
    with pytest.raises(redis.exceptions.NoScriptError):
        pipe.call("EVALSHA", "0" * 40, 0)
    raw = make_pipe(decode_responses=False)
    assert raw.call("GET", f"{prefix}:big") == big.encode()


def test_a_read_that_times_out_on_the_wire_is_ambiguous_and_the_next_call_reconnects(make_pipe, prefix):
    pipe = make_pipe(socket_timeout=0.2)
    pipe.call("PING")
    first = pipe._link.wire
    with pytest.raises(AmbiguousCallError) as info:
        pipe.call("EVAL", _SLOW_FIRST, 1, f"{prefix}:slow", "500", "x", resend=False)
    assert isinstance(info.value.__cause__, redis.TimeoutError)
    gevent.sleep(0.4)  # the script ends
    assert pipe.call("INCR", f"{prefix}:after") == 1
    assert pipe._link.wire is not first


def test_a_server_closing_the_connection_fails_the_call_on_the_wire(make_pipe, r, prefix):
    pipe = make_pipe()
    pipe.call("CLIENT", "SETNAME", "wire-victim")
    with pytest.raises(AmbiguousCallError) as info:
        # the server closes this connection before it answers the call written after it
        pipe.call_many([("CLIENT", "KILL", "SKIPME", "no", "ID", pipe.call("CLIENT", "ID")),
                        ("INCR", f"{prefix}:never")], resend=False)
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    assert r.get(f"{prefix}:never") is None
    assert pipe.call("INCR", f"{prefix}:next") == 1


def _in_forked_child(body) -> bytes:
    """Run ``body()`` (returning at most 64 bytes) in a forked child; what it returned."""
    import os
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write_end, body())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    try:
        return os.read(read_end, 64)
    finally:
        os.close(read_end)


def test_a_forked_child_never_writes_on_the_parents_connection(make_pipe):
    pipe = make_pipe()
    parent_id = pipe.call("CLIENT", "ID")
    # the child's calls go on a connection of its own (the parent's socket is shared by
    # both processes after the fork: answers would reach either)
    child = _in_forked_child(lambda: str(pipe.call("CLIENT", "ID")).encode())
    assert child and int(child) != parent_id
    assert pipe.call("CLIENT", "ID") == parent_id

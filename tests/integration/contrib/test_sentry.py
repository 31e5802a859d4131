"""The Sentry plugin with the real sentry-sdk and a transport that keeps the envelopes in
memory (as the SDK's own tests do), real workers on the suite's Redis: one event per job
that fails for good, transactions per run, the producer's trace continued, Crons check-ins,
and a Sentry that cannot be reached costs the jobs nothing. The same tests run on
sentry-sdk 2.x and 3.x (CI's extra lane puts 3.x in front): on 3.x, which sends streamed
spans instead of transactions, ``MemoryTransport.transactions`` reads a run's root span
into the fields the assertions read."""
from __future__ import annotations

import json
import socket

import pytest

sentry_sdk = pytest.importorskip("sentry_sdk")  # the sentry extra (the version matrix runs without it)

from sentry_sdk.transport import Transport  # noqa: E402

from echomq_gevent import Queue, UnrecoverableError, Worker  # noqa: E402
from echomq_gevent.contrib.sentry import SentryPlugin, producer_plugins, trace_headers  # noqa: E402
from echomq_gevent.plugins.host import PluginHost, make_plugin_manager  # noqa: E402
from running_command import run_python  # noqa: E402
from waiting import wait_until as wait_for  # noqa: E402


#: sentry-sdk 2.0 (the lowest the extra allows) sends no transaction's data, later 2.x do
SENDS_TRANSACTION_DATA = tuple(int(p) for p in sentry_sdk.VERSION.split(".")[:3]) > (2, 0, 0)
#: sentry-sdk 3.x: no transactions, root spans streamed, a span's status "ok" or "error"
SDK3 = sentry_sdk.VERSION.startswith("3.")
FAILED_STATUS = "error" if SDK3 else "internal_error"


class MemoryTransport(Transport):
    """Keeps every envelope the SDK would send."""

    def __init__(self, options=None):
        super().__init__(options)
        self.envelopes = []

    def capture_envelope(self, envelope):
        self.envelopes.append(envelope)

    def items(self, kind):
        return [item.payload.json for env in self.envelopes for item in env.items if item.type == kind]

    def transactions(self):
        """The transactions sent; on sentry-sdk 3.x the root spans (sent now, not at the
        batcher's next tick) read as one: name, source, op, status, ids and attributes as
        ``contexts.trace``, the ``echomq.*`` attributes as ``tags``, the ``echomq_job.*``
        ones as the ``echomq_job`` context, and their child spans as ``spans``."""
        if not SDK3:
            return self.items("transaction")
        batcher = getattr(sentry_sdk.get_client(), "span_batcher", None)
        if batcher is not None:
            batcher.flush()
        spans = [dict(span, attributes={k: v["value"] for k, v in span.get("attributes", {}).items()})
                 for payload in self.items("span") for span in payload["items"]]
        txns = []
        for root in (s for s in spans if s["is_segment"]):
            attrs = root["attributes"]
            trace = {"op": attrs.get("sentry.op"), "status": root["status"], "trace_id": root["trace_id"],
                     "span_id": root["span_id"], "parent_span_id": root.get("parent_span_id"), "data": attrs}
            txns.append({
                "transaction": root["name"], "start_timestamp": root["start_timestamp"],
                "transaction_info": {"source": attrs.get("sentry.segment.name.source")},
                "tags": {k: v for k, v in attrs.items() if k.startswith("echomq.")},
                "contexts": {"trace": trace, "echomq_job": {k.split(".", 1)[1]: v for k, v in attrs.items()
                                                            if k.startswith("echomq_job.")}},
                "spans": [{"op": s["attributes"].get("sentry.op"), "span_id": s["span_id"], "data": s["attributes"]}
                          for s in spans if not s["is_segment"] and s["attributes"].get("sentry.segment.id")
                          == root["span_id"]]})
        return txns


def _request(**kw):
    """The application's own transaction (on 3.x a root span), the producer's parent."""
    if not SDK3:
        return sentry_sdk.start_transaction(**kw)
    op = kw.pop("op", None)
    return sentry_sdk.start_span(attributes={"sentry.op": op} if op else None, **kw)


@pytest.fixture
def sentry():
    """Sentry set up as an application would, its envelopes kept in memory."""
    transport = MemoryTransport()
    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", transport=transport, traces_sample_rate=1.0,
                    default_integrations=False)
    yield transport
    sentry_sdk.get_client().close(timeout=0)
    sentry_sdk.Scope.get_global_scope().set_client(None)


def _worker(qname, redis_url, prefix, process, plugin, **kw):
    return Worker(qname, process, connection=redis_url, prefix=prefix, drain_delay=0.3,
                  plugins=PluginHost(make_plugin_manager([plugin])), **kw)


def _of(txns, job_id):
    return sorted((t for t in txns if t["tags"].get("echomq.job.id") == job_id), key=lambda t: t["start_timestamp"])


def fail_always(job):
    raise ValueError(f"mailbox full ({job.attempts_made + 1})")


def test_a_job_that_fails_three_times_is_one_event_with_its_retries_as_breadcrumbs(sentry, redis_url, prefix, qname,
                                                                                    queue):
    worker = _worker(qname, redis_url, prefix, fail_always, SentryPlugin())
    try:
        job = queue.add("mail", {"to": "ann"}, {"attempts": 3, "backoff": 0})
        worker.start()
        wait_for(lambda: queue.get_job_state(job.id) == "failed", what="the job failed")
        wait_for(lambda: len(sentry.transactions()) == 3, what="3 transactions")
    finally:
        worker.close(timeout=5)
    event, = sentry.items("event")
    exc, = event["exception"]["values"]
    assert exc["type"] == "ValueError" and exc["value"] == "mailbox full (3)"
    mechanism = dict(exc["mechanism"])
    if SDK3:
        assert mechanism.pop("exception_id") == 0  # 3.x numbers every exception of an event
    assert mechanism == {"type": "echomq_gevent", "handled": False}
    assert exc["stacktrace"]["frames"][-1]["function"] == "fail_always"
    assert {k: event["tags"][k] for k in ("echomq.queue", "echomq.job.name", "echomq.job.id", "echomq.attempt",
                                          "echomq.processor")} == {
        "echomq.queue": qname, "echomq.job.name": "mail", "echomq.job.id": job.id, "echomq.attempt": "3",
        "echomq.processor": f"{__name__}:fail_always"}
    retries = [b for b in event["breadcrumbs"]["values"] if b["category"] == "echomq.retry"]
    assert [b["message"] for b in retries] == ["attempt 1 failed: ValueError: mailbox full (1)",
                                              "attempt 2 failed: ValueError: mailbox full (2)"]
    runs = _of(sentry.transactions(), job.id)
    assert [t["tags"]["echomq.outcome"] for t in runs] == ["retried", "retried", "failed"]
    assert [t["contexts"]["trace"]["status"] for t in runs] == [FAILED_STATUS] * 3
    assert event["contexts"]["trace"]["trace_id"] == runs[2]["contexts"]["trace"]["trace_id"]


def test_an_unrecoverable_error_is_one_event_at_once(sentry, redis_url, prefix, qname, queue):
    def process(job):
        raise UnrecoverableError("no such customer")

    worker = _worker(qname, redis_url, prefix, process, SentryPlugin())
    try:
        job = queue.add("bill", {}, {"attempts": 5})
        worker.start()
        wait_for(lambda: len(sentry.items("event")) == 1, what="the event")
    finally:
        worker.close(timeout=5)
    event, = sentry.items("event")
    assert event["exception"]["values"][0]["type"] == "UnrecoverableError"
    assert not [b for b in event.get("breadcrumbs", {}).get("values", []) if b["category"] == "echomq.retry"]
    assert queue.get_job_state(job.id) == "failed"


def test_a_job_that_succeeds_after_a_retry_sends_no_event_and_a_transaction_per_run(sentry, redis_url, prefix, qname,
                                                                                    queue):
    def process(job):
        if job.attempts_made == 0:
            raise ConnectionError("smtp down")
        return "sent"

    worker = _worker(qname, redis_url, prefix, process, SentryPlugin(), name="mailer")
    try:
        job = queue.add("welcome", {}, {"attempts": 3, "backoff": 0})
        worker.start()
        wait_for(lambda: len(sentry.transactions()) == 2, what="2 transactions")
    finally:
        worker.close(timeout=5)
    assert queue.get_job_state(job.id) == "completed"
    assert sentry.items("event") == []
    first, second = _of(sentry.transactions(), job.id)
    for n, txn in enumerate((first, second), start=1):
        assert txn["transaction"] == "welcome"
        assert txn["transaction_info"] == {"source": "task"}
        assert txn["contexts"]["trace"]["op"] == "queue.process"
        assert txn["tags"]["echomq.queue"] == qname and txn["tags"]["echomq.attempt"] == str(n)
        assert txn["contexts"]["echomq_job"]["worker"] == "mailer"
        if SENDS_TRANSACTION_DATA:
            data = txn["contexts"]["trace"]["data"]
            assert data["messaging.message.id"] == job.id and data["messaging.destination.name"] == qname
    assert (first["tags"]["echomq.outcome"], second["tags"]["echomq.outcome"]) == ("retried", "completed")
    assert second["contexts"]["trace"]["status"] == "ok"
    assert second["tags"]["echomq.processor"].endswith("process")


def test_jobs_in_flight_together_keep_their_own_scopes(sentry, redis_url, prefix, qname, queue):
    import gevent.event

    started = []
    all_in = gevent.event.Event()

    def process(job):
        sentry_sdk.set_tag("mine", str(job.data["n"]))
        started.append(job.id)
        if len(started) == 10:
            all_in.set()
        assert all_in.wait(10), "the ten jobs were not in flight together"  # each tag set before any reports
        sentry_sdk.capture_message(f"from {job.data['n']}")

    worker = _worker(qname, redis_url, prefix, process, SentryPlugin(), concurrency=10)
    try:
        jobs = queue.add_bulk([("n", {"n": i}) for i in range(10)])
        worker.start()
        wait_for(lambda: len(sentry.items("event")) == 10, what="10 events")
    finally:
        worker.close(timeout=5)
    by_id = {j.id: j.data["n"] for j in jobs}
    for event in sentry.items("event"):
        n = by_id[event["tags"]["echomq.job.id"]]
        assert event["tags"]["mine"] == str(n) and event["message"] == f"from {n}"


def test_the_worker_continues_the_producers_trace(sentry, redis_url, prefix, qname, r):
    plugin = SentryPlugin()
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=producer_plugins(plugin))
    worker = _worker(qname, redis_url, prefix, lambda job: 1, plugin)
    try:
        with _request(op="http.server", name="POST /signup") as request:
            job = q.add("welcome", {"to": "ann"})
            quiet = q.add("welcome", {}, {"telemetry": {"omitContext": True}})
        worker.start()
        wait_for(lambda: len(sentry.transactions()) == 3, what="the request's and 2 jobs' transactions")
    finally:
        worker.close(timeout=5)
        q.close()
    carried = json.loads(json.loads(r.hget(f"{prefix}:{qname}:{job.id}", "opts"))["tm"])
    assert carried["sentry-trace"].startswith(request.trace_id)
    assert "sentry-trace_id=" + request.trace_id in carried["baggage"]
    producer = next(t for t in sentry.transactions() if t["transaction"] == "POST /signup")
    publish = [s for s in producer["spans"] if s["op"] == "queue.publish"]
    assert [s["data"]["messaging.message.id"] for s in publish] == [job.id, quiet.id]
    run, = _of(sentry.transactions(), job.id)
    assert run["contexts"]["trace"]["trace_id"] == request.trace_id
    assert run["contexts"]["trace"]["parent_span_id"] == publish[0]["span_id"]
    alone, = _of(sentry.transactions(), quiet.id)
    assert alone["contexts"]["trace"]["trace_id"] != request.trace_id  # omitContext: a trace of its own


def test_the_trace_rides_beside_opentelemetrys_in_the_same_metadata(sentry, redis_url, prefix, qname, r):
    from opentelemetry.sdk.trace import TracerProvider

    from echomq_gevent.contrib.otel import OtelPlugin

    host = PluginHost(make_plugin_manager([OtelPlugin(TracerProvider()), SentryPlugin()]))
    q = Queue(qname, connection=redis_url, prefix=prefix, plugins=host)
    try:
        with _request(name="t") as request:
            job = q.add("x", {})
    finally:
        q.close()
    carried = json.loads(json.loads(r.hget(f"{prefix}:{qname}:{job.id}", "opts"))["tm"])
    assert carried["traceparent"].startswith("00-") and carried["sentry-trace"].startswith(request.trace_id)


def test_a_w3c_traceparent_alone_is_continued():
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_headers({"telemetry": {"metadata": json.dumps({"traceparent": tp})}}) == {
        "sentry-trace": "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1"}
    assert trace_headers({"telemetry": {"metadata": "{not json"}}) == {}
    assert trace_headers({"telemetry": {"omitContext": True, "metadata": json.dumps({"traceparent": tp})}}) == {}


def test_scheduler_runs_check_in_ok_and_error(sentry, redis_url, prefix, qname, queue):
    def process(job):
        if job.name == "nightly-report":
            raise RuntimeError("report failed")
        return "ok"

    worker = _worker(qname, redis_url, prefix, process, SentryPlugin(crons=True, monitor_options={"max_runtime": 5}))
    try:
        queue.upsert_job_scheduler("Sync Orders", {"every": 120_000}, {"name": "sync"})
        queue.upsert_job_scheduler("nightly", {"pattern": "0 0 3 * * *", "tz": "Europe/Paris", "immediately": True},
                                   {"name": "nightly-report"})
        worker.start()
        wait_for(lambda: len(sentry.items("check_in")) == 4, what="4 check-ins")
    finally:
        worker.close(timeout=5)
    checkins = sentry.items("check_in")
    sync = [c for c in checkins if c["monitor_slug"] == "sync-orders"]
    nightly = [c for c in checkins if c["monitor_slug"] == "nightly"]
    assert [c["status"] for c in sync] == ["in_progress", "ok"]
    assert [c["status"] for c in nightly] == ["in_progress", "error"]
    assert sync[0]["check_in_id"] == sync[1]["check_in_id"] and nightly[0]["check_in_id"] == nightly[1]["check_in_id"]
    assert sync[0]["monitor_config"] == {"schedule": {"type": "interval", "value": 2, "unit": "minute"},
                                         "max_runtime": 5}
    assert nightly[0]["monitor_config"] == {"schedule": {"type": "crontab", "value": "0 3 * * *"},
                                            "timezone": "Europe/Paris", "max_runtime": 5}
    assert sync[1]["duration"] >= 0
    assert len(sentry.items("event")) == 1  # the failed run's error


def test_no_check_ins_unless_asked(sentry, redis_url, prefix, qname, queue):
    worker = _worker(qname, redis_url, prefix, lambda job: 1, SentryPlugin())
    try:
        queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "s"})
        worker.start()
        wait_for(lambda: len(sentry.transactions()) == 1, what="the run's transaction")
    finally:
        worker.close(timeout=5)
    assert sentry.items("check_in") == []


def test_the_plugin_keeps_the_applications_sentry(sentry):
    client = sentry_sdk.get_client()
    SentryPlugin(dsn="http://other@127.0.0.1:9/2")
    assert sentry_sdk.get_client() is client


def test_off_by_default_and_free_without_sentry(redis_url, prefix, qname):
    """Without SENTRY_DSN the module plugin sets nothing up and no job carries a trace; a
    process that does not name it never imports it."""
    code = (
        "import os, sys\n"
        "os.environ.pop('SENTRY_DSN', None)\n"
        "import gevent\n"
        "from echomq_gevent import Queue, Worker\n"
        "from echomq_gevent.plugins import PluginHost, make_plugin_manager\n"
        f"q0 = Queue({qname!r}, connection={redis_url!r}, prefix={prefix!r})\n"
        "q0.add('x', {})\n"
        "print('echomq_gevent.contrib.sentry' in sys.modules)\n"
        "host = PluginHost(make_plugin_manager(['echomq_gevent.contrib.sentry']))\n"
        f"q = Queue({qname!r}, connection={redis_url!r}, prefix={prefix!r}, plugins=host)\n"
        "job = q.add('x', {})\n"
        f"w = Worker({qname!r}, lambda j: 1, connection={redis_url!r}, prefix={prefix!r}, drain_delay=0.2,"
        " plugins=host)\n"
        "w.start()\n"
        "while q.get_job_state(job.id) != 'completed': gevent.sleep(0.02)\n"
        "w.close(timeout=5)\n"
        "import sentry_sdk\n"
        "from echomq_gevent.contrib import sentry\n"
        "print(sentry_sdk.is_initialized(), 'telemetry' in q.get_job(job.id).opts, len(sentry.default_plugin()._runs))\n"
    )
    assert run_python(code).split("\n")[:2] == ["False", "False False 0"]


@pytest.mark.parametrize("server", ["closed", "silent"])
def test_an_unreachable_sentry_does_not_slow_jobs_or_block_the_hub(server, redis_url, prefix, qname):
    """Under gevent's patching (as the command runs) with SENTRY_DSN on a closed port, or on
    a server that accepts and never answers: every failing job sends an event and a
    transaction through the SDK's background worker, whose socket I/O yields; the jobs
    complete and the hub never stalls."""
    listener = None
    if server == "silent":
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(512)
        port = listener.getsockname()[1]
    else:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nothing listens there now
    code = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import os, time, threading, gevent\n"
        f"os.environ['SENTRY_DSN'] = 'http://public@127.0.0.1:{port}/1'\n"
        "from echomq_gevent import Queue, Worker\n"
        "from echomq_gevent.plugins import PluginHost, make_plugin_manager\n"
        "from echomq_gevent.contrib.sentry import SentryPlugin\n"
        "plugin = SentryPlugin(traces_sample_rate=1.0)\n"
        "host = PluginHost(make_plugin_manager([plugin]))\n"
        "import sentry_sdk\n"
        "assert sentry_sdk.get_client().transport is not None\n"
        "gaps = [0.0]\n"
        "def ticker():\n"
        "    last = time.monotonic()\n"
        "    while True:\n"
        "        gevent.sleep(0.005); now = time.monotonic(); gaps[0] = max(gaps[0], now - last); last = now\n"
        "gevent.spawn(ticker)\n"
        "def process(job):\n"
        "    if job.data['n'] % 2: raise ValueError('boom')\n"
        f"q = Queue({qname!r}, connection={redis_url!r}, prefix={prefix!r})\n"
        "jobs = q.add_bulk([('x', {'n': i}) for i in range(200)])\n"
        f"w = Worker({qname!r}, process, connection={redis_url!r}, prefix={prefix!r}, concurrency=50,"
        " drain_delay=0.2, plugins=host)\n"
        "start = time.monotonic(); w.start()\n"
        "while q.get_job_counts('completed', 'failed') != {'completed': 100, 'failed': 100}:\n"
        "    gevent.sleep(0.01)\n"
        "    assert time.monotonic() - start < 30, q.get_job_counts('completed', 'failed')\n"
        "took = time.monotonic() - start\n"
        "w.close(timeout=5)\n"
        "worker = sentry_sdk.get_client().transport._worker\n"
        "print(round(took, 2), round(gaps[0], 3), worker.is_alive, threading.current_thread().__class__.__module__)\n"
        "os._exit(0)\n"  # no flush at exit: the events have nowhere to go
    )
    try:
        took, gap, alive, _ = run_python(code, timeout=90).split()
    finally:
        if listener is not None:
            listener.close()
    assert alive == "True"  # the SDK's worker was sending (or trying to) all along
    assert float(took) < 20, took
    assert float(gap) < 0.5, f"the hub stalled {gap} s"

"""The dashboard finds its queues by a SCAN of every key (BullMQ's ``meta`` and ``id``
keys): only the queues page needs that list. A page of one queue (its job list, the JSON
it polls, a job) checks that one queue with EXISTS, so on a Redis of a million jobs it
never waits seconds for a discovery (the scale bench's dashboard case)."""
from __future__ import annotations

import io

from echomq_gevent.contrib.dashboard import Dashboard
from echomq_gevent.contrib.dashboard import reads as dashboard_reads
from echomq_gevent.queue import discovery


def _get(app, path, query="", answer=None):
    """One GET through the WSGI app; (status, body text). ``answer`` (a dict) gets the
    headers too."""
    answer = {} if answer is None else answer

    def start_response(status, headers):
        answer["status"] = status
        answer["headers"] = dict(headers)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SCRIPT_NAME": "",
               "wsgi.input": io.BytesIO(b""), "wsgi.url_scheme": "http", "HTTP_HOST": "localhost"}
    body = b"".join(app(environ, start_response))
    return answer["status"], body.decode("utf-8")


def _counting_scans(monkeypatch):
    scans = []
    real = discovery.scan_keys

    def counted(*args, **kwargs):
        scans.append(args[1] if len(args) > 1 else kwargs.get("match"))
        return real(*args, **kwargs)

    monkeypatch.setattr(discovery, "scan_keys", counted)
    return scans


def test_the_pages_of_one_queue_do_not_discover_every_queue(queue, redis_url, prefix, qname, monkeypatch):
    job = queue.add("one", {"n": 1})
    scans = _counting_scans(monkeypatch)
    ui = Dashboard(redis_url, prefix=prefix)  # no queues named: found by discovery
    try:
        for path, query in (("/queue", f"name={qname}"), ("/api/counts", f"queue={qname}"),
                             ("/job", f"queue={qname}&id={job.id}")):
            status, body = _get(ui, path, query)
            assert status == "200 OK", (path, body[:300])
        assert scans == []
        # a queue without keys is still refused, without a discovery either
        status, _ = _get(ui, "/queue", "name=nosuchqueue")
        assert status == "404 Not Found" and scans == []
        # the queues page lists every queue: that one discovers them, in one pass over the
        # keys for both suffixes (meta and id)
        status, body = _get(ui, "/")
        assert status == "200 OK" and qname in body and len(scans) == 1
    finally:
        ui.close()


def test_a_queue_shown_by_name_or_known_needs_no_key(redis_url, prefix, monkeypatch):
    scans = _counting_scans(monkeypatch)
    ui = Dashboard(redis_url, prefix=prefix, known_queues=["fresh"])
    try:
        assert _get(ui, "/queue", "name=fresh")[0] == "200 OK"  # listed before it has keys
        assert _get(ui, "/queue", "name=other")[0] == "404 Not Found"
        assert scans == []
    finally:
        ui.close()
    named = Dashboard(redis_url, prefix=prefix, queues=["only"])
    try:
        assert _get(named, "/queue", "name=only")[0] == "200 OK"
        assert _get(named, "/queue", "name=fresh")[0] == "404 Not Found"
    finally:
        named.close()


def test_a_stale_list_of_queues_is_served_while_a_discovery_refreshes_it_behind(queue, r, redis_url, prefix, qname,
                                                                                 monkeypatch, wait_for):
    """Only the first discovery is waited for: once the list is older than
    ``discover_every_s``, the queues page gets the last list at once and the SCAN runs
    behind it, so no page waits seconds for it on a Redis of a million jobs."""
    import threading

    queue.add("one", {})
    real = discovery.scan_keys
    release = threading.Event()
    scanning = threading.Event()
    blocked = {"on": False}

    def slow_scan(*args, **kwargs):
        if blocked["on"]:
            scanning.set()
            assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(discovery, "scan_keys", slow_scan)
    ui = Dashboard(redis_url, prefix=prefix, discover_every_s=0)  # every list is stale at once
    try:
        assert ui.queue_names() == [qname]  # the first discovery: waited for
        r.hset(f"{prefix}:{qname}-new:meta", "paused", 0)
        blocked["on"] = True
        assert ui.queue_names() == [qname]  # the last list, while the refresh is held in its SCAN
        assert scanning.wait(5)
        assert ui.queue_names() == [qname]  # one refresh at a time; still the last list
        release.set()
        wait_for(lambda: ui.queue_names() == sorted([qname, f"{qname}-new"]), what="the refreshed list")
    finally:
        release.set()
        ui.close()


def test_the_first_discovery_is_waited_for_briefly_then_the_page_says_it_is_looking(queue, redis_url, prefix, qname,
                                                                                    monkeypatch, wait_for):
    """A queues page never waits long for the first discovery (0.6 s per million keys):
    after FIRST_DISCOVERY_WAIT_S it lists the queues known so far, says it is looking and
    reloads itself (a Refresh header); once the discovery ends, the list is there."""
    import threading

    queue.add("one", {})
    real = discovery.scan_keys
    release = threading.Event()

    def held_scan(*args, **kwargs):
        assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(discovery, "scan_keys", held_scan)
    monkeypatch.setattr(dashboard_reads, "FIRST_DISCOVERY_WAIT_S", 0.05)
    ui = Dashboard(redis_url, prefix=prefix, known_queues=["announced"])
    try:
        answer = {}
        status, body = _get(ui, "/", answer=answer)
        assert status == "200 OK"
        assert 'id="discovering"' in body and "announced" in body and qname not in body
        assert answer["headers"].get("Refresh") == "1"
        assert "No queue found" not in body
        release.set()
        wait_for(lambda: not ui.reads.discovering, what="the first discovery")
        answer = {}
        status, body = _get(ui, "/", answer=answer)
        assert status == "200 OK" and qname in body and 'id="discovering"' not in body
        assert "Refresh" not in answer["headers"]
    finally:
        release.set()
        ui.close()


def test_a_first_discovery_that_fails_is_reported_by_the_page(redis_url, prefix, monkeypatch):
    def broken_scan(*args, **kwargs):
        raise dashboard_reads.Refused("503 Service Unavailable", "scan refused for the test")

    monkeypatch.setattr(discovery, "scan_keys", broken_scan)
    ui = Dashboard(redis_url, prefix=prefix)
    try:
        status, body = _get(ui, "/")
        assert status == "503 Service Unavailable" and "scan refused for the test" in body
    finally:
        ui.close()

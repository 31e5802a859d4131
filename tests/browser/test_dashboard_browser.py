"""The dashboard in a real headless Chromium: counts, a retry from the page, escaping,
CSRF, read-only mode."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from browser_helpers import serving, wait_for

from echomq_gevent.contrib.dashboard import STATES


def count_cells(browser, qname):
    return browser.js(
        "(function(){var r=document.querySelector('tr[data-queue=%s]');var o={};"
        "r.querySelectorAll('[data-count]').forEach(function(e){o[e.getAttribute('data-count')]=+e.textContent;});"
        "return o;})()" % json.dumps(qname))


def test_overview_and_queue_page_counts_match_get_job_counts(browser, dashboard, filled, queue, qname):
    expected = queue.get_job_counts(*STATES)
    assert expected["completed"] == 3 and expected["failed"] == 2 and expected["waiting"] == 4
    with serving(dashboard()) as base:
        browser.goto(base + "/")
        assert count_cells(browser, qname) == expected
        browser.click(f"tr[data-queue={json.dumps(qname)}] a")
        tabs = browser.js("(function(){var o={};document.querySelectorAll('.tabs [data-count]').forEach("
                          "function(e){o[e.getAttribute('data-count')]=+e.textContent;});return o;})()")
        assert tabs == expected
        # the failed tab lists both failed jobs with their reasons
        browser.click(".tabs a[href*='state=failed']")
        listed = browser.js("Array.from(document.querySelectorAll('#jobs tr td:first-child a'))"
                            ".map(function(a){return a.textContent})")
        assert sorted(listed) == sorted(filled["failed"])
        assert "failed on purpose" in browser.text("#jobs")


def test_paging_and_search_by_id(browser, dashboard, queue, qname):
    ids = [queue.add("many", {"n": i}).id for i in range(7)]
    with serving(dashboard(page_size=3)) as base:
        browser.goto(f"{base}/queue?name={qname}&state=waiting")
        seen = []
        while True:
            seen += browser.js("Array.from(document.querySelectorAll('#jobs td:first-child a'))"
                               ".map(function(a){return a.textContent})")
            if not browser.js("!!document.querySelector('a[rel=next]')"):
                break
            browser.click("a[rel=next]")
        assert sorted(seen, key=int) == sorted(ids, key=int) and len(seen) == 7
        browser.js(f"document.querySelector('.search input[name=id]').value={json.dumps(ids[4])}")
        browser.click(".search button")
        assert browser.text("#job-id") == ids[4]
        assert json.loads(browser.text("#data")) == {"n": 4}
        browser.goto(f"{base}/queue?name={qname}&id=nope")
        assert "No job with id nope" in browser.text("main")


def test_job_page_shows_data_options_progress_logs_result(browser, dashboard, filled, queue, qname):
    done = filled["completed"][0]
    failed = filled["failed"][0]
    with serving(dashboard()) as base:
        browser.goto(f"{base}/job?queue={qname}&id={done}")
        assert json.loads(browser.text("#returnvalue")) == {"ok": True, "id": done}
        assert json.loads(browser.text("#progress")) == 100
        assert browser.text("#logs") == f"processed {done}"
        assert json.loads(browser.text("#data")) == {"n": 0}
        browser.goto(f"{base}/job?queue={qname}&id={failed}")
        assert browser.text("#failedReason") == f"boom: job {failed} failed on purpose"
        assert "ValueError" in browser.text(".stack")


def test_retry_from_the_page_moves_a_failed_job_to_wait(browser, dashboard, filled, queue, qname):
    job_id = filled["failed"][1]
    assert queue.get_job_state(job_id) == "failed"
    with serving(dashboard(actions=True)) as base:
        browser.goto(f"{base}/job?queue={qname}&id={job_id}")
        browser.click("[data-action=retry]")
        assert browser.text("#confirm-text") == f"Retry job {job_id} of queue {qname}?"
        assert queue.get_job_state(job_id) == "failed"  # nothing happens before the confirmation
        browser.click("#confirm")
        assert browser.text("#flash") == f"job {job_id} retried"
    assert queue.get_job_state(job_id) == "waiting"


def test_pause_resume_and_clean_from_the_page(browser, dashboard, filled, queue, qname):
    with serving(dashboard(actions=True)) as base:
        browser.goto(f"{base}/queue?name={qname}")
        browser.click("[data-action=pause]")
        browser.click("#confirm")
        assert queue.is_paused()
        browser.click("[data-action=resume]")
        browser.click("#confirm")
        assert not queue.is_paused()
        browser.goto(f"{base}/queue?name={qname}&state=completed")
        browser.click("[data-action=clean]")
        browser.click("#confirm")
        assert browser.text("#flash") == "3 completed job(s) removed"
    assert queue.get_job_counts("completed") == {"completed": 0}


def test_job_data_with_script_is_shown_as_text_never_run(browser, dashboard, queue, qname):
    payload = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    job = queue.add('<b id="bold">name</b>', {"html": payload}, {"jobId": "<i>x</i>"})
    job.log('<script>window.__pwned = 3</script>')
    with serving(dashboard(actions=True)) as base:
        for path in (f"/queue?name={qname}", f"/job?queue={qname}&id=%3Ci%3Ex%3C%2Fi%3E",
                     f"/confirm?queue={qname}&action=remove&job=%3Ci%3Ex%3C%2Fi%3E"):
            browser.goto(base + path)
            assert browser.js("typeof window.__pwned") == "undefined"
            assert browser.js("document.scripts.length") == 1  # the page's own script only
            assert browser.js("document.querySelectorAll('main b#bold, main i, main img').length") == 0
    with serving(dashboard()) as base:
        browser.goto(f"{base}/job?queue={qname}&id=%3Ci%3Ex%3C%2Fi%3E")
        assert json.loads(browser.text("#data")) == {"html": payload}
        assert browser.text("#job-id") == "<i>x</i>"
        assert browser.text("#logs") == "<script>window.__pwned = 3</script>"
        assert browser.js("typeof window.__pwned") == "undefined"


def post_from_page(browser, url, fields):
    """POST a form body from the page's own origin (with its cookie); returns the status."""
    body = "&".join(f"{k}={v}" for k, v in fields.items())
    return browser.js(
        "fetch(%s,{method:'POST',redirect:'manual',credentials:'same-origin',"
        "headers:{'Content-Type':'application/x-www-form-urlencoded'},body:%s})"
        ".then(function(r){return r.type==='opaqueredirect'?303:r.status})" % (json.dumps(url), json.dumps(body)))


def test_an_action_without_the_token_is_refused(browser, dashboard, filled, queue, qname):
    job_id = filled["failed"][0]
    fields = {"queue": qname, "action": "retry", "job": job_id, "state": "failed"}
    with serving(dashboard(actions=True)) as base:
        browser.goto(f"{base}/job?queue={qname}&id={job_id}")
        assert post_from_page(browser, base + "/action", fields) == 403
        assert post_from_page(browser, base + "/action", {**fields, "csrf": "x" * 43}) == 403
        # no cookie at all (another site's form, a script): refused too
        req = urllib.request.Request(base + "/action", data="&".join(f"{k}={v}" for k, v in fields.items()).encode())
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("a POST without cookie and token was accepted")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
            assert b"CSRF token" in exc.read()
        assert queue.get_job_state(job_id) == "failed"
        # the page's own confirmation form carries the token and is accepted
        browser.goto(f"{base}/confirm?queue={qname}&action=retry&job={job_id}&state=failed")
        token = browser.js("document.querySelector('input[name=csrf]').value")
        assert post_from_page(browser, base + "/action", {**fields, "csrf": token}) == 303
    assert queue.get_job_state(job_id) == "waiting"


def test_read_only_by_default(browser, dashboard, filled, queue, qname):
    job_id = filled["failed"][0]
    with serving(dashboard()) as base:
        browser.goto(f"{base}/job?queue={qname}&id={job_id}")
        assert browser.js("document.querySelectorAll('[data-action]').length") == 0
        assert "read-only" in browser.text("header")
        browser.goto(f"{base}/confirm?queue={qname}&action=retry&job={job_id}")
        assert "actions are disabled" in browser.text("#error")
        assert post_from_page(browser, base + "/action", {"queue": qname, "action": "retry", "job": job_id}) == 403
    assert queue.get_job_state(job_id) == "failed"


def test_screenshots_of_the_main_pages(browser, redis_url, prefix, tmp_path):
    """``make screenshots`` (tests/browser/screenshots.py) under this test's prefix: the
    pictures of docs/dashboard.md are made from a shop's queues, every page is a PNG."""
    import screenshots

    shown = screenshots.take(browser, redis_url, prefix, str(tmp_path))
    for name in screenshots.pages(shown):
        with open(os.path.join(str(tmp_path), name), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n", name
    # what the pictures show: the shop's queues, the mail chart from BullMQ's metrics
    from echomq_gevent import Queue

    mail = Queue("mail", connection=redis_url, prefix=prefix)
    try:
        counts = mail.get_job_counts("completed", "failed")
        recorded = mail.get_metrics("completed")["data"]
    finally:
        mail.close()
    assert counts == {"completed": sum(c for c, _f in screenshots.MINUTES) + 1,
                      "failed": sum(f for _c, f in screenshots.MINUTES) + 1}
    assert sum(recorded) == sum(c for c, _f in screenshots.MINUTES)
    assert shown["invoice"] == "acme-2024-05"


def test_mounted_under_the_middleware_at_echomq_ui(browser, dashboard, filled, queue, qname):
    from echomq_gevent.contrib.wsgi import EchoMQMiddleware

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the app"]

    job_id = filled["failed"][0]
    with serving(EchoMQMiddleware(app, dashboard=dashboard(actions=True))) as base:
        browser.goto(base + "/elsewhere")
        assert browser.text("body") == "the app"
        browser.goto(base + "/_echomq/ui")
        assert count_cells(browser, qname) == queue.get_job_counts(*STATES)
        browser.click(f"tr[data-queue={json.dumps(qname)}] a")
        assert browser.url().startswith(base + "/_echomq/ui/queue?")
        browser.goto(f"{base}/_echomq/ui/job?queue={qname}&id={job_id}")
        browser.click("[data-action=retry]")
        browser.click("#confirm")
        assert browser.url().startswith(base + "/_echomq/ui/job?")
    assert queue.get_job_state(job_id) == "waiting"


def test_throughput_chart_from_count_samples(browser, dashboard, queue, qname, redis_url, prefix):

    from echomq_gevent import Worker

    queue.add("first", {})
    with serving(dashboard(sample_every_s=0)) as base:
        browser.goto(f"{base}/queue?name={qname}")  # first sample: nothing completed
        assert browser.js("document.querySelectorAll('.chart polyline').length") == 0
        assert "no data yet" in browser.text(".chart")
        worker = Worker(qname, lambda job: 1, connection=redis_url, prefix=prefix, drain_delay=0.5)
        worker.start()
        try:
            for i in range(5):
                queue.add("more", {"i": i})
            wait_for(lambda: queue.get_job_counts("completed")["completed"] == 6, what="6 completed jobs")
        finally:
            worker.close(timeout=5)
        browser.goto(f"{base}/queue?name={qname}")
        assert browser.js("document.querySelectorAll('.chart polyline.completed').length") == 1
        assert "count samples" in browser.text(".chart figcaption")
        assert float(browser.text(".chart .peak")) > 0


def test_a_post_from_another_origin_is_refused_even_with_the_token(dashboard, filled, queue, qname):
    job_id = filled["failed"][0]
    with serving(dashboard(actions=True)) as base:
        with urllib.request.urlopen(f"{base}/queue?name={qname}", timeout=10) as resp:
            cookie = resp.headers["Set-Cookie"].split(";")[0]
        token = cookie.split("=", 1)[1]
        body = f"queue={qname}&action=retry&job={job_id}&state=failed&csrf={token}".encode()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)

        def post(origin):
            headers = {"Cookie": cookie, **({"Origin": origin} if origin else {})}
            try:
                return opener.open(urllib.request.Request(base + "/action", data=body, headers=headers),
                                   timeout=10).status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert post("http://evil.example") == 403
        assert post("null") == 403
        assert queue.get_job_state(job_id) == "failed"
        assert post(base) == 303
    assert queue.get_job_state(job_id) == "waiting"

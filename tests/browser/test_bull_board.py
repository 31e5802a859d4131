"""bull-board (Node) and our dashboard over the same queues show the same counts and job
details: bull-board read through its JSON API (what its UI renders), ours in Chromium."""
from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import pytest

from browser_helpers import serving, wait_for

from echomq_gevent.contrib.dashboard import STATES

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BULL_BOARD = os.path.join(TESTS, "interop", "node", "bull_board.js")

pytestmark = pytest.mark.interop


@pytest.fixture
def bull_board(redis_url, prefix, qname):
    from interop.interop_node import _node_binary

    proc = subprocess.Popen([_node_binary(), BULL_BOARD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps({"redis": redis_url, "prefix": prefix, "queues": [qname]}) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(f"bull_board.js did not start: {proc.stderr.read()[-2000:]}")
    base = f"http://127.0.0.1:{json.loads(line)['port']}/ui"

    def api(path):
        with urllib.request.urlopen(base + path, timeout=15) as resp:
            return json.load(resp)

    yield api
    proc.stdin.close()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def test_bull_board_and_our_dashboard_agree(browser, dashboard, bull_board, filled, queue, qname):
    board = bull_board(f"/api/queues?activeQueue={qname}&status=failed&page=1&jobsPerPage=20")
    theirs, = [q for q in board["queues"] if q["name"] == qname]
    with serving(dashboard()) as base:
        browser.goto(base + "/")
        ours = browser.js(
            "(function(){var r=document.querySelector('tr[data-queue=%s]');var o={};"
            "r.querySelectorAll('[data-count]').forEach(function(e){o[e.getAttribute('data-count')]=+e.textContent;});"
            "return o;})()" % json.dumps(qname))
        assert ours == {s: theirs["counts"].get(s, 0) for s in STATES}
        assert ours == queue.get_job_counts(*STATES)
        # the failed list: the same ids
        browser.goto(f"{base}/queue?name={qname}&state=failed")
        listed = browser.js("Array.from(document.querySelectorAll('#jobs td:first-child a')).map(function(a){return a.textContent})")
        assert sorted(listed) == sorted(j["id"] for j in theirs["jobs"])
        # a failed and a completed job: the same details
        for job_id in (filled["failed"][0], filled["completed"][0]):
            detail = bull_board(f"/api/queues/{qname}/{job_id}")
            job = detail["job"]
            browser.goto(f"{base}/job?queue={qname}&id={job_id}")
            assert browser.text("#job-id") == job["id"]
            assert browser.js("document.querySelector('.facts tr td').textContent") == detail["status"]
            assert json.loads(browser.text("#data")) == job["data"]
            assert json.loads(browser.text("#opts")) == job["opts"]
            assert json.loads(browser.text("#progress")) == job["progress"]
            facts = browser.js("(function(){var o={};document.querySelectorAll('.facts tr').forEach(function(r){"
                               "o[r.querySelector('th').textContent]=r.querySelector('td').textContent;});return o;})()")
            assert facts["name"] == job["name"]
            assert int(facts["attempts made"]) == job["attempts"]
            assert int(facts["delay (ms)"]) == job["delay"]
            if job.get("failedReason"):
                assert browser.text("#failedReason") == job["failedReason"]
                stacks = browser.js("Array.from(document.querySelectorAll('.stack')).map(function(e){return e.textContent})")
                assert list(reversed(stacks)) == job["stacktrace"]  # bull-board shows the newest first
            else:
                assert json.loads(browser.text("#returnvalue")) == job["returnValue"]
            logs = bull_board(f"/api/queues/{qname}/{job_id}/logs")
            assert browser.text("#logs") == "\n".join(logs)


def test_schedulers_and_flows_made_by_node_show_on_our_pages(browser, dashboard, queue, qname, redis_url, prefix):
    from interop.interop_node import NodeTool

    node = NodeTool(redis_url, prefix, qname)
    try:
        node.run("queueCall", method="upsertJobScheduler", args=["nightly-report", {"every": 3_600_000},
                                                                   {"name": "report", "data": {"k": 1}}])
        flow = node.run("flow", tree={"name": "bundle", "queueName": qname, "data": {},
                                      "children": [{"name": "part", "queueName": qname, "data": {"i": i}}
                                                   for i in range(2)]})
    finally:
        node.close()
    parent_id = flow["id"]
    child_ids = sorted(c["id"] for c in flow["children"])
    with serving(dashboard()) as base:
        browser.goto(f"{base}/queue?name={qname}")
        assert "nightly-report" in browser.text("main")
        browser.goto(f"{base}/job?queue={qname}&id={parent_id}")
        assert browser.js("document.querySelector('.facts tr td').textContent") == "waiting-children"
        links = browser.js("Array.from(document.querySelectorAll('#children a')).map(function(a){return a.textContent})")
        assert sorted(links) == sorted(f"{prefix}:{qname}:{c}" for c in child_ids)
        browser.click("#children a")
        assert browser.text("#job-id") in child_ids
        assert browser.text(".facts a") == f"{prefix}:{qname}:{parent_id}"  # the parent, linked back

"""Admin calls against the real Node ``bullmq@6.7.0``: ``clean``, ``retryJobs``,
``promoteJobs``, ``job.retry``, ``promote``, ``changeDelay``, ``changePriority``,
``remove``, states and logs.

Most tests are twins: the same jobs are built in two queues, Node runs the call on one and
our ``Queue``/``Job`` on the other, and every key of both queues (job hashes, state sets and
lists, markers, the events stream without ids) must come out equal. Where our scripts
differ on purpose (docs/protocol.md, "Where we chose") the test says so.
"""
from __future__ import annotations

import json
import subprocess
from typing import Any, Dict, List, Tuple

import pytest

from echomq_gevent import Job, Queue
from echomq_gevent.errors import JobNotExist, JobNotInState
from interop_helpers import dump_queue, finish_opts, now_ms
from interop_node import BULLMQ_DIR, NodeToolError

pytestmark = pytest.mark.interop

TOKEN = "11111111-2222-3333-4444-555555555555:0"

#: A Node script run with ``node -e``: reads {redis, prefix, queue, args} on stdin, opens a
#: Queue, runs BODY (an async function body with ``queue``, ``Job`` and ``args`` in scope)
#: and prints {"ok": true, "result": ...} or {"ok": false, "name", "error"}.
_NODE_TEMPLATE = r"""
const { Queue, Job } = require(%(bullmq)s);
let input = '';
process.stdin.on('data', chunk => { input += chunk; });
process.stdin.on('end', async () => {
  const cmd = JSON.parse(input);
  const u = new URL(cmd.redis);
  const queue = new Queue(cmd.queue, {
    prefix: cmd.prefix,
    connection: { host: u.hostname, port: Number(u.port), db: Number(u.pathname.slice(1) || 0) },
  });
  let out;
  try {
    const run = async (queue, Job, args) => { %(body)s };
    const result = await run(queue, Job, cmd.args || {});
    out = { ok: true, result: result === undefined ? null : result };
  } catch (err) {
    out = { ok: false, name: err && err.name, error: err && err.message };
  }
  await queue.close();
  process.stdout.write(JSON.stringify(out) + '\n');
});
"""


def node_eval(node: Any, queue: str, body: str, **args: Any) -> Dict[str, Any]:
    """Run ``body`` against a Node Queue named ``queue``; returns the result line."""
    script = _NODE_TEMPLATE % {"bullmq": json.dumps(BULLMQ_DIR), "body": body}
    payload = {"redis": node.redis_url, "prefix": node.prefix, "queue": queue, "args": args}
    proc = subprocess.run([node.binary, "-e", script], input=json.dumps(payload), text=True,
                          capture_output=True, timeout=30)
    lines = [ln for ln in proc.stdout.split("\n") if ln.strip()]
    assert lines, f"node -e printed nothing (exit {proc.returncode}); stderr:\n{proc.stderr[-2000:]}"
    return json.loads(lines[-1])


def node_ok(node: Any, queue: str, body: str, **args: Any) -> Any:
    line = node_eval(node, queue, body, **args)
    assert line["ok"], f"Node failed: {line.get('name')}: {line.get('error')}"
    return line["result"]


@pytest.fixture
def twins(redis_url, prefix, qname):
    """Two of our Queues, ``<q>n`` (Node acts on it) and ``<q>p`` (we act on it)."""
    node_q = Queue(qname + "n", connection=redis_url, prefix=prefix)
    our_q = Queue(qname + "p", connection=redis_url, prefix=prefix)
    yield node_q, our_q
    node_q.close()
    our_q.close()


def build(q: Queue, old: int, fresh: int, delayed: bool = True) -> None:
    """The same jobs in every queue, with fixed times: finished jobs at ``old`` and
    ``fresh``, then waiting, prioritized and delayed ones (ids 1..N in this order)."""
    for name, target, at in (("c-old", "completed", old), ("c-new", "completed", fresh),
                             ("f-old", "failed", old), ("f-new", "failed", fresh)):
        q.add(name, {"n": name}, {"timestamp": old, "attempts": 1})
        res = q.scripts.move_to_active(TOKEN, 30000, old)
        job_id = str(res[1])
        field = "returnvalue" if target == "completed" else "failedReason"
        value = '"done"' if target == "completed" else "boom"
        q.scripts.move_to_finished(job_id, at, field, value, target, False, finish_opts(TOKEN, 1))
    q.add("w-old", {}, {"timestamp": old})
    q.add("w-new", {}, {"timestamp": fresh})
    q.add("p-old", {}, {"timestamp": old, "priority": 2})
    q.add("p-new", {}, {"timestamp": fresh, "priority": 1})
    if delayed:
        q.add("d-old", {}, {"timestamp": old, "delay": 600000})
        q.add("d-new", {}, {"timestamp": fresh, "delay": 600000})


def both(r, node_q: Queue, our_q: Queue) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    return dump_queue(r, node_q.keys), dump_queue(r, our_q.keys)


def assert_same(r, node_q: Queue, our_q: Queue) -> None:
    theirs, ours = both(r, node_q, our_q)
    diff = {k: {"node": theirs.get(k), "ours": ours.get(k)} for k in set(theirs) | set(ours)
            if theirs.get(k) != ours.get(k)}
    assert not diff, f"keys differ after the same call: {diff}"


# -- Queue.clean ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["completed", "failed", "waiting", "delayed", "prioritized"])
def test_clean_twin(node, r, twins, kind):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        build(q, now - 60000, now)
    theirs = node_ok(node, node_q.name, "return queue.clean(args.grace, 0, args.type);",
                     grace=30000, type=kind)
    ours = our_q.clean(30000, type=kind)
    assert len(ours) == 1 and sorted(ours) == sorted(theirs)
    assert_same(r, node_q, our_q)


def test_clean_with_limit_and_active_twin(node, r, twins):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        build(q, now - 60000, now - 50000, delayed=False)
        # one active job whose lock is held, one whose lock is gone
        for _ in range(2):
            q.scripts.move_to_active(TOKEN, 30000, now - 40000)
        r.delete(q.keys.lock("5"))
    theirs = node_ok(node, node_q.name, "return queue.clean(0, 1, 'completed');")
    assert our_q.clean(0, limit=1) == theirs
    theirs = node_ok(node, node_q.name, "return queue.clean(0, 0, 'active');")
    assert our_q.clean(0, type="active") == theirs == ["5"]
    assert_same(r, node_q, our_q)


# -- Queue.retry_jobs / promote_jobs -------------------------------------------------------
@pytest.mark.parametrize("state", ["failed", "completed"])
def test_retry_jobs_twin(node, r, twins, state):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        build(q, now - 60000, now - 10000, delayed=False)
        # drop the prioritized jobs: Node's moveJobsToWait ignores priorities (we do not)
        q.drain()
    node_ok(node, node_q.name,
            "await queue.retryJobs({count: 1, state: args.state, timestamp: args.ts});",
            state=state, ts=now - 30000)
    our_q.retry_jobs(count=1, state=state, timestamp=now - 30000)
    assert len(r.zrange(our_q.keys.state_key(state), 0, -1)) == 1
    assert_same(r, node_q, our_q)
    # and the rest, with the default timestamp (now)
    node_ok(node, node_q.name, "await queue.retryJobs({state: args.state});", state=state)
    our_q.retry_jobs(state=state)
    assert r.zcard(our_q.keys.state_key(state)) == 0
    assert_same(r, node_q, our_q)


def test_promote_jobs_twin(node, r, twins):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        for i in range(3):
            q.add("d", {"i": i}, {"timestamp": now, "delay": 600000 + i})
    node_ok(node, node_q.name, "await queue.promoteJobs({count: 2});")
    our_q.promote_jobs(count=2)
    theirs, ours = both(r, node_q, our_q)
    # The one documented difference: we also set `delay` to 0 (as promote does).
    for i in ("1", "2", "3"):
        assert ours[i][1].pop("delay") == "0"
        assert theirs[i][1].pop("delay") == str(600000 + int(i) - 1)
    assert theirs == ours
    assert node.run("counts", queue=our_q.name, types=["waiting", "delayed"]) == {
        "waiting": 3, "delayed": 0}


# -- Job.retry / promote / change_delay / change_priority / remove -----------------------
@pytest.mark.parametrize("state", ["failed", "completed"])
def test_job_retry_twin(node, r, twins, state):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        build(q, now - 60000, now - 10000, delayed=False)
    job_id = "1" if state == "completed" else "3"
    node.run("retry", queue=node_q.name, jobId=job_id, state=state)
    our_q.get_job(job_id).retry(state)
    assert_same(r, node_q, our_q)
    # with both resets (a failed job starts over with all its attempts)
    other = "2" if state == "completed" else "4"
    node_ok(node, node_q.name,
            "const job = await Job.fromId(queue, args.id);"
            "await job.retry(args.state, {resetAttemptsMade: true, resetAttemptsStarted: true});"
            "return [job.attemptsMade, job.attemptsStarted];", id=other, state=state)
    job = our_q.get_job(other)
    job.retry(state, reset_attempts_made=True, reset_attempts_started=True)
    assert (job.attempts_made, job.attempts_started) == (0, 0)
    assert_same(r, node_q, our_q)


def test_job_retry_errors_agree(node, twins):
    node_q, our_q = twins
    for q in twins:
        q.add("w", {})
    with pytest.raises(NodeToolError):
        node.run("retry", queue=node_q.name, jobId="1", state="failed")
    with pytest.raises(JobNotInState, match="job 1 .* is waiting, not failed"):
        our_q.get_job("1").retry()
    line = node_eval(node, node_q.name, "const job = await Job.fromId(queue, '1');"
                     "await queue.remove('1'); await job.retry('failed');")
    assert not line["ok"]
    job = our_q.get_job("1")
    our_q.remove_job("1")
    with pytest.raises(JobNotExist, match="job 1 .* does not exist"):
        job.retry()


def test_job_promote_twin(node, r, twins):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        q.add("d", {}, {"timestamp": now, "delay": 600000})
        q.add("dp", {}, {"timestamp": now, "delay": 600000, "priority": 3})
    for job_id in ("1", "2"):
        node.run("promote", queue=node_q.name, jobId=job_id)
        our_q.get_job(job_id).promote()
    assert_same(r, node_q, our_q)
    with pytest.raises(NodeToolError):
        node.run("promote", queue=node_q.name, jobId="1")
    with pytest.raises(JobNotInState, match="cannot promote it: job 1 .* not delayed"):
        our_q.get_job("1").promote()


def _without_due_times(dump: Dict[str, Any]) -> Tuple[Dict[str, Any], List[int]]:
    """The dump with the times changeDelay derives from its own clock taken out:
    delayed/marker scores and the ``delayed`` events' due time (returned, in ms)."""
    out = dict(dump)
    dues: List[int] = []
    for suffix in ("delayed", "marker"):
        if suffix in out:
            kind, members = out[suffix]
            out[suffix] = (kind, [m for m, _score in members])
            dues.extend(int(score) // (4096 if suffix == "delayed" else 1) for _m, score in members)
    kind, entries = out["events"]
    cleaned = []
    for fields in entries:
        if fields.get("event") == "delayed":
            fields = dict(fields)
            dues.append(int(fields.pop("delay")))
        cleaned.append(fields)
    out["events"] = (kind, cleaned)
    return out, dues


def test_job_change_delay_twin(node, r, twins):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        q.add("d", {}, {"timestamp": now, "delay": 600000})
    before = now_ms()
    node.run("changeDelay", queue=node_q.name, jobId="1", delay=120000)
    job = our_q.get_job("1")
    job.change_delay(120000)
    after = now_ms()
    theirs, their_dues = _without_due_times(dump_queue(r, node_q.keys))
    ours, our_dues = _without_due_times(dump_queue(r, our_q.keys))
    assert theirs == ours
    # the add's own delayed event is the first due time; the rest come from changeDelay
    for dues in (their_dues, our_dues):
        new = [d for d in dues if d != now + 600000]
        assert new and all(before + 120000 <= d <= after + 120000 for d in new), dues
    # errors: not delayed / gone
    for q in twins:
        q.add("w", {})
    with pytest.raises(NodeToolError):
        node.run("changeDelay", queue=node_q.name, jobId="2", delay=10)
    with pytest.raises(JobNotInState, match="job 2 .* is waiting, not delayed"):
        our_q.get_job("2").change_delay(10)
    assert not node_eval(node, node_q.name, "await queue.backend.changeDelay('nope', 10);")["ok"]
    with pytest.raises(JobNotExist):
        Job(our_q.scripts, "nope").change_delay(10)


@pytest.mark.parametrize("priority,lifo", [(5, False), (0, True), (0, False), (4, True)])
def test_job_change_priority_twin(node, r, twins, priority, lifo):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        q.add("a", {}, {"timestamp": now})
        q.add("b", {}, {"timestamp": now, "priority": 2})
        q.add("c", {}, {"timestamp": now, "priority": 4})
        q.add("d", {}, {"timestamp": now, "delay": 600000})
    for job_id in ("1", "2", "4"):
        node.run("changePriority", queue=node_q.name, jobId=job_id, priority=priority, lifo=lifo)
        our_q.get_job(job_id).change_priority(priority, lifo)
    assert_same(r, node_q, our_q)
    node_state = node.run("getState", queue=our_q.name, jobId="2")
    assert node_state == our_q.get_job_state("2") == ("prioritized" if priority else "waiting")


def test_job_remove_twin_and_locked_refusal(node, r, twins):
    node_q, our_q = twins
    now = now_ms()
    for q in twins:
        build(q, now - 60000, now - 10000)
    for job_id in ("1", "3", "5", "7", "9"):
        assert node.run("remove", queue=node_q.name, jobId=job_id) == 1
        our_q.get_job(job_id).remove()
    assert_same(r, node_q, our_q)
    # an active job with a lock: both refuse
    for q in twins:
        q.scripts.move_to_active(TOKEN, 30000, now)
    line = node_eval(node, node_q.name, "const job = await Job.fromId(queue, '6');"
                     "await job.remove();")
    assert not line["ok"] and "locked" in line["error"]
    with pytest.raises(RuntimeError, match="locked"):
        our_q.get_job("6").remove()


# -- states and logs ---------------------------------------------------------------------
def test_states_and_probes_agree_with_node(node, r, twins):
    _, q = twins
    now = now_ms()
    build(q, now - 60000, now - 10000)
    q.scripts.move_to_active(TOKEN, 30000, now)  # job 5 (w-old) becomes active
    r.zadd(q.keys.waiting_children, {"wc": 1})
    r.hset(q.keys.job("wc"), mapping={"name": "wc", "data": "{}", "opts": "{}", "timestamp": now})
    ids = [str(i) for i in range(1, 11)] + ["wc", "nope"]
    node_views = node_ok(
        node, q.name,
        "const out = {};"
        "for (const id of args.ids) {"
        "  const job = await Job.fromId(queue, id);"
        "  out[id] = [await queue.getJobState(id), job ? [await job.isCompleted(),"
        "    await job.isFailed(), await job.isDelayed(), await job.isActive(),"
        "    await job.isWaiting(), await job.isWaitingChildren()] : null];"
        "}"
        "return out;", ids=ids)
    for job_id in ids:
        job = q.get_job(job_id)
        probes = None if job is None else [job.is_completed(), job.is_failed(), job.is_delayed(),
                                           job.is_active(), job.is_waiting(),
                                           job.is_waiting_children()]
        assert [q.get_job_state(job_id), probes] == node_views[job_id], job_id


def test_job_logs_ranges_agree_with_node(node, twins):
    _, q = twins
    job = q.add("logged", {})
    for i in range(6):
        job.log(f"line {i}")
    for start, end, asc in ((0, -1, True), (1, 3, True), (0, -1, False), (0, 1, False),
                            (2, 10, False)):
        theirs = node.run("getJobLogs", queue=q.name, jobId=job.id, start=start, end=end, asc=asc)
        assert q.get_job_logs(job.id, start, end, asc) == theirs, (start, end, asc)


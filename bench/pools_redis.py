"""The pools bench's ``redis`` case: what a job costs Redis alone over 1 and over 100
queues, with no worker beside it.

A driver runs the jobs by their scripts straight from this process: 100 slots, each
holding a job of its queue (slot ``i`` on queue ``i % Q``, picked up first by our
``moveToActive-11``); every finish completes the job and fetches its queue's next one in
the same call (fetch-next, as every worker does), the finishes of 8 slots at a time sent
together. Only the finishes are measured. The same jobs, the same commands, over one
queue's keys or 100 queues'; what differs is only where the keys are. The calls' keys and
arguments are made by the worker's own builders (:mod:`echomq_gevent.protocol`).

- **BullMQ's own script** (``moveToFinished-14`` of the pinned Node package, with its
  fetch-next, as its ``Worker`` sends it): one call a finish, 8 calls a pipeline.
- **Ours, as the worker sends them**: one queue's finishes in one ``moveToFinishedMany-11``
  call, a pool's over several queues in one ``moveToFinishedQueues-0`` call, 8 a call.

Each layout runs once a round, the order reversed every other round; a round's ratio is
against the one queue of the same round and source. Reported: Redis's CPU a job
(``INFO cpu``) and its time in the scripts a job (``INFO commandstats``).
"""
from __future__ import annotations

import os
import subprocess
from typing import Any, Callable, Dict, List, Optional, Tuple

from .harness import ROOT, Bench, BenchError

PREFIX = "bredis"
SLOTS = 100
BATCH = 8
NODE_SCRIPTS = os.path.join(ROOT, "tests", "node_modules", "bullmq", "dist", "cjs", "scripts")
#: (label, source, queues, how the finishes are sent, the label its ratio is against)
LAYOUTS = (("BullMQ's scripts, one queue", "bullmq", 1, "single", "BullMQ's scripts, one queue"),
           ("BullMQ's scripts, 100 queues", "bullmq", 100, "single", "BullMQ's scripts, one queue"),
           ("ours, one queue (moveToFinishedMany-11)", "ours", 1, "many",
            "ours, one queue (moveToFinishedMany-11)"),
           ("ours, 100 queues (moveToFinishedQueues-0)", "ours", 100, "queues",
            "ours, one queue (moveToFinishedMany-11)"))


def bullmq_finish_script() -> Tuple[Optional[str], Optional[str]]:
    """BullMQ's ``moveToFinished-14`` as its package ships it (includes expanded), and
    None; or None and why it cannot be read here."""
    import shutil

    if shutil.which("node") is None:
        return None, "no node on PATH"
    path = os.path.join(NODE_SCRIPTS, "moveToFinished-14.js")
    if not os.path.isfile(path):
        return None, f"no {os.path.relpath(path, ROOT)} (make tests/node_modules/.installed)"
    res = subprocess.run(["node", "-e", f"process.stdout.write(require({path!r}).moveToFinished.content)"],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0 or not res.stdout:
        return None, f"node could not read moveToFinished-14: {res.stderr.strip()[-500:]}"
    return res.stdout, None


def fill(url: str, queue: str, n: int, prefix: str, name: str = "j", paused: bool = False) -> None:
    """``n`` jobs into ``queue`` with our producer (one pipeline a 1,000), the queue paused
    first when ``paused``."""
    from echomq_gevent import Queue

    q = Queue(queue, connection=url, prefix=prefix)
    try:
        if paused:
            q.pause()
        for start in range(0, n, 1000):
            q.add_bulk([(name, {"i": i}) for i in range(start, min(n, start + 1000))])
    finally:
        q.close()


def _job_id(answer: Any) -> Optional[str]:
    """The id of the job a fetch answer brought (None: none), or raise on an error (a
    negative code, or the typed error our calls put in its place)."""
    if isinstance(answer, list) and len(answer) > 1 and answer[1]:
        return str(answer[1])
    if answer in (0, None) or isinstance(answer, list):
        return None
    raise BenchError(f"a finish answered {answer!r}")


def run_layout(bench: Bench, bullmq_finish: Optional[str], queues: int, send: str, n: int) -> Dict[str, float]:
    """Fill ``n`` jobs over ``queues`` queues and run them all, finishing with BullMQ's
    ``moveToFinished-14`` (``bullmq_finish``, one call a finish) or as our worker sends
    them (``send``: ``many`` or ``queues``); Redis's CPU and script time a job over the
    finishes. The calls' keys and arguments are the worker's own (:mod:`echomq_gevent.protocol`)."""
    from echomq_gevent.protocol.clock import now_ms
    from echomq_gevent.protocol.keys import QueueKeys
    from echomq_gevent.protocol.scripts import Scripts, pack

    r = bench.client
    assert r is not None
    bench.flush()
    names = [f"r{queues}-{i}" for i in range(queues)]
    n = n // queues * queues
    for name in names:
        fill(bench.url, name, n // queues, PREFIX)
    scripts = {name: Scripts(r, QueueKeys(name, PREFIX)) for name in names}
    bullmq_sha = r.script_load(bullmq_finish) if bullmq_finish is not None else None
    token = "bench-token"
    finish_opts = pack({"token": token, "keepJobs": {"count": -1}, "lockDuration": 30000, "attempts": 0,
                        "maxMetricsSize": ""})
    slots: List[Tuple[str, str]] = []  # (queue, the id of the job it holds), each picked up by our moveToActive-11
    for i in range(SLOTS):
        q = names[i % queues]
        jid = _job_id(scripts[q].move_to_active(token, 30000, now_ms()))
        if jid is not None:
            slots.append((q, jid))
    r.config_resetstat()
    cpu0 = r.info("cpu")
    done = 0
    live = list(range(len(slots)))
    while live:
        still = []
        for at in range(0, len(live), BATCH):
            group = live[at:at + BATCH]
            now = now_ms()
            if bullmq_sha is not None:  # one EVALSHA a finish, pipelined, as Node's worker sends them
                pipe = r.pipeline(transaction=False)
                for i in group:
                    q, jid = slots[i]
                    keys, args = scripts[q].move_to_finished_args(jid, now, "returnvalue", "null", "completed",
                                                                  True, finish_opts)
                    pipe.evalsha(bullmq_sha, len(keys), *keys, *args)
                answers: List[Any] = pipe.execute(raise_on_error=True)
            else:
                calls = [scripts[slots[i][0]].move_to_finished_call(slots[i][1], now, "returnvalue", "null",
                                                                    "completed", True, finish_opts)
                         for i in group]
                sc = scripts[slots[group[0]][0]]
                answers = sc.move_to_finished_many(calls) if send == "many" else sc.move_to_finished_queues(calls)
            for i, answer in zip(group, answers):
                done += 1
                jid = _job_id(answer)
                if jid is not None:
                    slots[i] = (slots[i][0], jid)
                    still.append(i)
        live = still
    cpu1 = r.info("cpu")
    stats = r.info("commandstats")
    for sc in scripts.values():
        sc.release_connections()
    if done != n:
        raise BenchError(f"{done} jobs finished of {n}")
    cpu = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_user", "used_cpu_sys"))
    return {"redis_us_per_job": round(cpu / n * 1e6, 1),
            "script_us_per_job": round(int(stats.get("cmdstat_evalsha", {}).get("usec", 0)) / n, 1)}


def redis_alone_case(bench: Bench, n: int, rounds: int, log: Callable[[str], None]) -> Dict[str, Any]:
    """Every layout ``rounds`` times (BullMQ's only when its package can be read here):
    ``{"rows": [...], "bullmq_skipped": why or None}``, each row with the medians over
    the rounds and each round's ratio against its one queue."""
    bullmq, skipped = bullmq_finish_script()
    layouts = [lay for lay in LAYOUTS if lay[1] == "ours" or bullmq is not None]
    runs: Dict[str, List[Dict[str, float]]] = {lay[0]: [] for lay in layouts}
    for rnd in range(rounds):
        order = layouts if rnd % 2 == 0 else layouts[::-1]
        got = {}
        for label, source, queues, send, _base in order:
            got[label] = run_layout(bench, bullmq if source == "bullmq" else None, queues, send, n)
            log(f"redis alone: {label}: Redis {got[label]['redis_us_per_job']} µs/job, scripts "
                f"{got[label]['script_us_per_job']} µs/job")
        for label, _source, _queues, _send, base in layouts:
            row = dict(got[label])
            row["x_redis"] = round(row["redis_us_per_job"] / max(0.1, got[base]["redis_us_per_job"]), 3)
            row["x_scripts"] = round(row["script_us_per_job"] / max(0.1, got[base]["script_us_per_job"]), 3)
            runs[label].append(row)
    rows = []
    for label, source, queues, send, base in layouts:
        out: Dict[str, Any] = {"case": label, "source": source, "queues": queues, "send": send, "base": base,
                               "jobs": n}
        for part in ("redis_us_per_job", "script_us_per_job", "x_redis", "x_scripts"):
            values = [row[part] for row in runs[label]]
            out[part] = sorted(values)[len(values) // 2]
            out[part + "_rounds"] = values
        rows.append(out)
    return {"rows": rows, "bullmq_skipped": skipped}


def markdown(res: Optional[Dict[str, Any]]) -> List[str]:
    """The case's section of ``pools.md`` (nothing when it did not run)."""
    if not res:
        return []
    rows = res["rows"]
    jobs = rows[0]["jobs"] if rows else 0
    out = ["", "## Redis alone: the scripts over 1 and 100 queues, no worker", "",
           f"{jobs:,} jobs a layout, run by their scripts straight from the bench: {SLOTS} slots, each finishing "
           f"its job and fetching its queue's next in the same call, {BATCH} finishes sent together. BullMQ's "
           "own `moveToFinished-14`, one call a finish as its Worker sends it, and ours as the worker sends "
           "them: one queue's finishes in a `moveToFinishedMany-11` call, several queues' in a "
           "`moveToFinishedQueues-0` call. A round's ratio is against the one queue of the same round and "
           "scripts; the row gives the medians.", "",
           "| layout | Redis CPU µs/job | in the scripts µs/job | × one queue: Redis CPU (rounds) | "
           "× one queue: scripts |",
           "|---|---|---|---|---|"]
    for r in rows:
        rounds = ", ".join(f"{x:.2f}" for x in r["x_redis_rounds"])
        out.append(f"| {r['case']} | {r['redis_us_per_job']} | {r['script_us_per_job']} | {r['x_redis']:.2f} "
                   f"({rounds}) | {r['x_scripts']:.2f} |")
    if res.get("bullmq_skipped"):
        out += ["", f"BullMQ's scripts did not run: {res['bullmq_skipped']}."]
    return out

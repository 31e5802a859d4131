"""Scale bench driver: admin calls of an ``echomq_gevent.Queue`` on a big queue.

Run by ``bench/scale/`` (``admin.py``, ``lateness.py``) as ``python bench/drivers/scale_admin_ours.py '<json>'`` with
``{url, queue, prefix}``. Prints ``READY`` once connected, then reads one JSON line per
operation on stdin (``{"op": "clean"|"obliterate"|"retry_jobs"|"get_jobs"|"get_job_counts"|
"drain"|"dash"|"schedulers", "start": .., "end": ..}``), runs it and prints
``{"ms": elapsed}``. The same protocol as ``scale_admin_node.js``. ``dash`` is what a
dashboard's job list reads (the first 50 waiting jobs and the counts); ``schedulers``
upserts each of ``specs`` (``[id, repeat options, template]``) with the queue's API.
"""
import importlib.util
import json
import os
import sys
import time
from typing import Any, Dict

if importlib.util.find_spec("echomq_gevent") is None:  # a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from echomq_gevent import Queue  # noqa: E402


def run(queue: Any, req: Dict[str, Any]) -> Any:
    op = req["op"]
    if op == "clean":
        return len(queue.clean(0, 0, "completed"))
    if op == "obliterate":
        return queue.obliterate(force=True)
    if op == "retry_jobs":
        return queue.retry_jobs(count=1000, state="failed")
    if op == "get_jobs":
        return len(queue.get_jobs(["completed"], req["start"], req["end"]))
    if op == "get_job_counts":
        return queue.get_job_counts()
    if op == "drain":
        return queue.drain()
    if op == "dash":
        return [len(queue.get_jobs(["waiting"], 0, 49)), queue.get_job_counts()]
    if op == "schedulers":
        for sid, repeat, template in req["specs"]:
            queue.upsert_job_scheduler(sid, repeat, template)
        return len(req["specs"])
    raise ValueError(f"unknown op {op!r}")


def main(cfg: Dict[str, Any]) -> None:
    queue = Queue(cfg["queue"], connection=cfg["url"], prefix=cfg["prefix"])
    queue.get_job_counts()  # connect and load the script used by counts
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.perf_counter()
        out = run(queue, req)
        ms = (time.perf_counter() - t0) * 1000.0
        sys.stdout.write(json.dumps({"ms": ms, "result": out}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

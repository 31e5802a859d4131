"""QueueEvents in a real, monkey-patched process: the reader runs on the hub itself (its
socket yields), waits for a result, survives a killed connection and closes cleanly."""
from __future__ import annotations

import json
import os
import subprocess

from target import PYTHON

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_PATCHED_SCRIPT = r'''
from gevent import monkey; monkey.patch_all()
import json, sys
import gevent, redis
from echomq_gevent import Queue, QueueEvents, Worker
url, prefix, name = sys.argv[1:4]
q = Queue(name, connection=url, prefix=prefix)
r = redis.Redis.from_url(url, decode_responses=True)
ev = QueueEvents(name, connection=url, prefix=prefix, blocking_timeout=1000)
added, errors = [], []
ev.on("added", lambda a, i: added.append(a["jobId"]))
ev.on("error", lambda e, i: errors.append(str(e)))
w = Worker(name, lambda j: j.data["x"] * 2, connection=url, prefix=prefix, drain_delay=0.5)
w.start()
value = q.add("a", {"x": 21}).wait_until_finished(ev, timeout=10)
for c in r.client_list():
    if c.get("name") == ev.client_name:
        r.execute_command("CLIENT", "KILL", "ID", c["id"])
q.add("b", {"x": 1})
with gevent.Timeout(10):
    while len(added) < 2:
        gevent.sleep(0.01)
ev.close()
w.close(timeout=2)
print(json.dumps({"value": value, "added": added, "errors": len(errors)}))
'''


def test_in_a_monkey_patched_process(redis_url, prefix, qname):
    """The reader on the hub itself (sockets patched): results, reconnection, close."""
    out = subprocess.run([PYTHON, "-c", _PATCHED_SCRIPT, redis_url, prefix, qname], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # the killed read is reported once (none if the client library retried it by itself)
    assert got["value"] == 42 and got["added"] == ["1", "2"] and got["errors"] in (0, 1), got

"""The Python examples of docs/flows.md run as they are, each in its own (monkey-patched,
where the example says so) process, on this session's Redis, and print what their
comments say."""
from __future__ import annotations

import os
import re
import subprocess

from target import PYTHON

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUEUES = ("renders", "frames", "reports", "parts")


def _examples():
    with open(os.path.join(REPO, "docs", "flows.md"), encoding="utf-8") as fh:
        return re.findall(r"```python\n(.*?)```", fh.read(), re.S)


def test_the_flows_guide_examples_run(redis_url, r):
    blocks = _examples()
    assert len(blocks) >= 5
    env = dict(os.environ, REDIS_URL=redis_url)
    outputs = []
    try:
        for block in blocks:
            done = subprocess.run([PYTHON, "-c", block], env=env, capture_output=True, text=True,
                                  timeout=90)
            assert done.returncode == 0, f"example failed:\n{block}\n{done.stderr}"
            outputs.append(done.stdout)
    finally:
        for queue_name in QUEUES:
            keys = list(r.scan_iter(match=f"bull:{queue_name}:*"))
            if keys:
                r.delete(*keys)
    assert outputs[0].split()[1] == "waiting-children"
    assert "['waiting', 'prioritized']" in outputs[0]
    assert "{'frames': 3, 'bytes': 6000}" in outputs[1]
    assert outputs[2].strip() == "14"
    assert outputs[4].strip() == "render ['frame']"

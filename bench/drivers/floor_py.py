"""Benchmark driver: the cost of one sequential Redis round trip from redis-py.

``python bench/drivers/floor_py.py '{"url", "n", "gevent": bool, "single": bool}'``: times N sequential PINGs
and N sequential EVALSHAs shaped like a ``moveToFinished`` call (14 keys, 8 arguments) against
a trivial script, with redis-py (hiredis parser) plain or under ``gevent.monkey.patch_all()``,
through the connection pool or on one kept connection (``"single": true``).
Prints one JSON line per probe: ``{"probe", "per_s", "wall_us", "cpu_us"}``.
"""
import json
import sys

CFG = json.loads(sys.argv[1])
if CFG.get("gevent"):
    from gevent import monkey

    monkey.patch_all()

import os  # noqa: E402
import time  # noqa: E402

import redis  # noqa: E402


def main() -> None:
    client = redis.Redis.from_url(CFG["url"], decode_responses=True,
                                  single_connection_client=bool(CFG.get("single")))
    sha = client.script_load("return 1")
    keys = [f"bench:floor:k{i}" for i in range(14)]
    args = ["1", "1795968331925", "returnvalue", "null", "completed", "1", "bench:floor:", "x" * 120]
    probes = [("PING", client.ping), ("EVALSHA 14 keys, 8 args", lambda: client.evalsha(sha, 14, *keys, *args))]
    n = int(CFG["n"])
    for label, fn in probes:
        for _ in range(min(500, n)):
            fn()
        c0, t0 = os.times(), time.perf_counter()
        for _ in range(n):
            fn()
        t1, c1 = time.perf_counter(), os.times()
        cpu = (c1.user - c0.user) + (c1.system - c0.system)
        print(json.dumps({"probe": label, "per_s": n / (t1 - t0), "wall_us": 1e6 * (t1 - t0) / n,
                          "cpu_us": 1e6 * cpu / n}), flush=True)
    client.close()


if __name__ == "__main__":
    main()

"""Benchmark driver: our Relay, publisher and subscriber nodes in this gevent-patched
process; the twin of ``relay_node.js`` (same argument, same measurements, same output)."""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent.event  # noqa: E402

from echomq_gevent.relay import Relay  # noqa: E402


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    cfg = json.loads(sys.argv[1])
    sub = Relay(cfg["url"], namespace=cfg["namespace"], node_id="sub", block_timeout=1000)
    pub = Relay(cfg["url"], namespace=cfg["namespace"], node_id="pub")
    sub.wait_until_ready(30)
    pub.wait_until_ready(30)
    arrived = gevent.event.Event()
    latency = []

    def on_latency(msg):
        latency.append(time.perf_counter() * 1000 - msg.data["s"])
        arrived.set()

    all_in = gevent.event.Event()
    received = [0]

    def on_throughput(_msg):
        received[0] += 1
        if received[0] == cfg["throughputN"]:
            all_in.set()

    sub.subscribe("bench.latency", on_latency)
    sub.subscribe("bench.throughput", on_throughput)
    cpu0 = cpu_s()
    for i in range(cfg["latencyN"]):
        arrived.clear()
        pub.publish("bench.latency", {"i": i, "s": time.perf_counter() * 1000})
        if not arrived.wait(10):
            raise SystemExit(f"latency message {i} did not arrive within 10 s")
    t0 = time.perf_counter()
    for i in range(cfg["throughputN"]):
        pub.publish("bench.throughput", {"i": i})
    if not all_in.wait(60):
        raise SystemExit(f"only {received[0]} of {cfg['throughputN']} throughput messages arrived")
    throughput_s = time.perf_counter() - t0
    cpu = cpu_s() - cpu0
    sub.close()
    pub.close()
    print(json.dumps({"latency_ms": latency, "throughput_s": throughput_s, "cpu_s": cpu}))


if __name__ == "__main__":
    main()

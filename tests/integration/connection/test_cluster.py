"""Redis Cluster: three primaries with a replica each, on free ports. Queues, workers,
events, flows and the runner on a cluster URL, a ``RedisCluster`` client and the YAML
form; the hash-tag rule; queues spread over the primaries."""
from __future__ import annotations

import html
import io
import json
import subprocess
import sys
from collections import Counter

import gevent
import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from echomq_gevent import Queue, Worker
from echomq_gevent.connection.cluster import CrossSlotError, key_slot
from echomq_gevent.protocol.keys import ClusterHashTagError
from echomq_gevent.connection.routing import ClusterRouter
from echomq_gevent.connection.slot_client import SlotClient
from echomq_gevent.host.config import parse_config
from echomq_gevent.connection.clients import make_client
from echomq_gevent.contrib.dashboard import Dashboard
from echomq_gevent.queue.events import QueueEvents
from echomq_gevent.queue.flows import FlowProducer
from integration.worker_helpers import runner_ran_ten_jobs


def _run(worker_ids, done, wait_for, n, what):
    wait_for(lambda: len(done) >= n, timeout=60, what=what, details=lambda: f"{len(done)} of {n}")


def test_queue_worker_and_events_on_a_cluster_url(cluster, qname, wait_for):
    prefix = "{t%s}" % qname
    queue = Queue(qname, connection=cluster.url, prefix=prefix)
    ids = [queue.add("job", {"i": i}).id for i in range(60)]
    done: Counter = Counter()

    def process(job):
        gevent.sleep(0.002)
        done[job.id] += 1
        return job.data["i"] * 2

    heard = set()
    listener = QueueEvents(qname, connection=cluster.url, prefix=prefix)
    listener.on("completed", lambda args, _id: heard.add(args.get("jobId")))
    assert listener.wait_until_ready(10)
    worker = Worker(qname, process, connection=cluster.url, prefix=prefix, concurrency=4, drain_delay=1)
    worker.start()
    try:
        wait_for(lambda: len(done) == 60, timeout=60, what="60 jobs done", details=lambda: f"{len(done)}")
        # the marker wait blocks on the primary serving the queue's slot, where getWorkers() finds it
        assert isinstance(worker._fetch.blocking, SlotClient)
        owner = cluster.owner_of(key_slot(f"{prefix}:{qname}:marker"))
        assert worker._fetch.blocking.node == f"127.0.0.1:{owner}"
        wait_for(lambda: len(queue.get_workers()) == 1, what="getWorkers() to see the worker")
        late = queue.add("late", {"i": 100})  # an idle worker is woken by the marker on its node
        wait_for(lambda: late.id in done, timeout=30, what="a job added to an idle worker")
        wait_for(lambda: late.id in heard, timeout=30, what="QueueEvents to hear it complete")
        assert queue.get_job(late.id).returnvalue == 200
        assert queue.get_job_state(late.id) == "completed"  # reads INFO server of a node
        assert set(done) == set(ids) | {late.id} and max(done.values()) == 1
        assert queue.get_job_counts()["completed"] == 61
    finally:
        worker.close(timeout=10)
        listener.close()
        queue.close()


def test_a_redis_cluster_client_is_taken_and_tagless_keys_are_refused(cluster, qname, wait_for):
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cluster.nodes[0].port)])  # not decoding
    with pytest.raises(ClusterHashTagError, match=r"prefix '\{bull\}'"):
        Queue(qname, connection=client)
    with pytest.raises(ClusterHashTagError):
        Worker(qname, lambda job: None, connection=cluster.url)
    tagged = "{%s}" % qname  # the tag in the queue name: this queue gets its own slot
    queue = Queue(tagged, connection=client, prefix="bull")
    assert queue.client is not client  # a decoding clone
    job = queue.add("job", {"x": 1})
    assert client.hget(f"bull:{tagged}:{job.id}", "name") == b"job"
    done = []
    worker = Worker(tagged, lambda job: done.append(job.id) or "ok", connection=client, prefix="bull",
                    drain_delay=1)
    worker.start()
    try:
        wait_for(lambda: done == [job.id], timeout=30, what="the job done through a RedisCluster client")
    finally:
        worker.close(timeout=10)
        queue.close()
        client.close()


def _one_queue_per_primary(cluster, qname, prefix="bull"):
    """Queue names with their own hash tags, one on each primary of ``cluster``."""
    names, owners = [], set()
    i = 0
    while len(owners) < len(cluster.primary_ports()):
        name = "{%s%d}" % (qname, i)
        owner = cluster.owner_of(key_slot(f"{prefix}:{name}:wait"))
        if owner not in owners:
            owners.add(owner)
            names.append(name)
        i += 1
    return names


def test_queues_with_their_own_tags_spread_over_the_primaries(cluster, qname, wait_for):
    names = _one_queue_per_primary(cluster, qname)
    assert len(names) == 3
    done: Counter = Counter()
    queues = [Queue(n, connection=cluster.url) for n in names]
    workers = [Worker(n, lambda job: done.update([job.queue_name]), connection=cluster.url, concurrency=3,
                      drain_delay=1) for n in names]
    for w in workers:
        w.start()
    try:
        for q in queues:
            q.add_bulk([{"name": "job", "data": {"i": i}} for i in range(30)])
        wait_for(lambda: sum(done.values()) == 90, timeout=60, what="30 jobs of each queue done",
                 details=lambda: str(done))
        assert done == Counter({n: 30 for n in names})
        for n in names:  # each queue's keys live on its own primary
            owner = cluster.owner_of(key_slot(f"bull:{n}:completed"))
            assert redis.Redis(port=owner).zcard(f"bull:{n}:completed") == 30
    finally:
        for w in workers:
            w.close(timeout=10)
        for q in queues:
            q.close()


def test_queue_discovery_and_status_see_a_queue_on_every_primary(cluster, qname):
    prefix = "d" + qname  # untagged: each queue's own tag puts it on its own primary
    names = _one_queue_per_primary(cluster, qname, prefix)
    assert len({cluster.owner_of(key_slot(f"{prefix}:{n}:id")) for n in names}) == 3
    queues = [Queue(n, connection=cluster.url, prefix=prefix) for n in names]
    dashboard = Dashboard(cluster.url, prefix=prefix)
    try:
        for i, q in enumerate(queues):
            q.add_bulk([{"name": "job", "data": {}}] * (i + 1))
        assert dashboard.queue_names() == sorted(names)  # BullMQ's id and meta keys, on every primary
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": "", "SCRIPT_NAME": "",
                   "wsgi.input": io.BytesIO(b""), "wsgi.url_scheme": "http", "HTTP_HOST": "localhost"}
        status = []
        page = b"".join(dashboard(environ, lambda s, h: status.append(s))).decode("utf-8")
        assert status == ["200 OK"]
        for name in names:
            assert html.escape(name) in page
        out = subprocess.run([sys.executable, "-m", "echomq_gevent", "--redis", cluster.url, "--prefix", prefix,
                              "status", "--json", *names], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert {n: report[n]["counts"]["waiting"] for n in names} == {n: i + 1 for i, n in enumerate(names)}
    finally:
        dashboard.close()
        for q in queues:
            q.close()


def test_a_moved_answer_moves_the_slot_in_the_map_on_this_redis_py(cluster, qname):
    """redis-py 5.1+ moves the slot at once (NodesManager.move_slot); 4.6, the lowest the
    package allows, has no move_slot and applies a pending MOVED on its next look-up: the
    router takes both (the matrix's lowest session runs this on 4.6)."""
    client = make_client(cluster.url)
    router = ClusterRouter(client)
    try:
        slot = key_slot("{%s}" % qname)
        manager = client.nodes_manager
        owner = manager.get_node_from_slot(slot)
        other = next(n for n in client.get_primaries() if n.name != owner.name)
        router.moved(other.host, other.port, slot)
        assert manager.get_node_from_slot(slot).name == other.name
        print(f"\nredis-py {redis.__version__}: move_slot {'present' if hasattr(manager, 'move_slot') else 'missing'}")
        router.refresh()  # the cluster's own answer puts it back
        assert manager.get_node_from_slot(slot).name == owner.name
    finally:
        router.release()
        client.close()


def test_flows_need_one_slot(cluster, qname):
    prefix = "{f%s}" % qname
    producer = FlowProducer(connection=cluster.url, prefix=prefix)
    try:
        node = producer.add({"name": "parent", "queueName": qname + "p", "data": {},
                             "children": [{"name": "child", "queueName": qname + "c", "data": {}}]})
        parent_queue = Queue(qname + "p", connection=cluster.url, prefix=prefix)
        assert parent_queue.get_job_counts()["waiting-children"] == 1
        parent_queue.close()
        other = FlowProducer(connection=cluster.url, prefix="bull")
        with pytest.raises(CrossSlotError, match="same hash tag"):
            other.add({"name": "parent", "queueName": "{%sa}" % qname, "data": {},
                       "children": [{"name": "child", "queueName": "{%sb}" % qname, "data": {}}]})
        other.close()
        child_queue = Queue("{%sb}" % qname, connection=cluster.url)
        with pytest.raises(CrossSlotError):
            child_queue.add("child", {}, {"parent": {"id": node["job"].id, "queue": f"{prefix}:{qname}p"}})
        child_queue.close()
    finally:
        producer.close()


def test_the_runner_from_a_yaml_cluster_list(cluster, qname, wait_for):
    nodes = ", ".join(f'"127.0.0.1:{n.port}"' for n in cluster.nodes[:2])
    cfg = parse_config(f"""
redis:
  cluster: [{nodes}]
  socket_timeout: 5
prefix: "{{y{qname}}}"
entry_points: false
queues:
  {qname}: {{concurrency: 2, drain_delay: 0.5, shutdown_timeout: 5}}
""")
    assert cfg.redis.url.startswith("redis+cluster://")
    with runner_ran_ten_jobs(cfg, qname, wait_for) as (runner, _queue):
        assert [h.running for h in runner.health()] == [True]

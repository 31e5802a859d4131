"""A Redis Cluster that requires a password (``requirepass`` and ``masterauth``: its
replicas log in too) and has an ACL user: the password in the URL's user part, the
user and password in the YAML ``redis.cluster`` mapping; jobs added and processed end
to end, the blocking and lock-renewal clients and ``getWorkers()`` included; a running job
cancelled from another process through the workers' subscription, which logs in too."""
from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import quote

import pytest
import redis
from redis.exceptions import RedisClusterException

from echomq_gevent import Queue, Worker
from echomq_gevent.connection.cluster import key_slot, node_client
from echomq_gevent.host.config import parse_config
from echomq_gevent.worker.remote_cancel import SUBSCRIBER_NAME, _registry
from integration.queue_helpers import take
from integration.worker_helpers import runner_ran_ten_jobs, sleeper_until_cancelled
from redis_server import ClusterGroup

PASSWORD = "pa:ss@w/rd#1"  # characters a URL must quote
USER = ("echomq", "us3r%pass?word")


@pytest.fixture(scope="module")
def locked():
    with ClusterGroup(password=PASSWORD, user=USER) as group:
        yield group


def _hosts(cluster):
    return ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes[:2])


def test_nodes_refuse_a_client_without_the_password(locked):
    port = locked.nodes[0].port
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()
    assert redis.Redis(port=port, username=USER[0], password=USER[1]).ping()
    assert locked.healthy()  # the replicas logged in to their primaries (masterauth)


def _subscription_ended(wait_for):
    """The closed worker's cancellation subscription has ended (the next test counts the
    connections of each user)."""
    wait_for(lambda: not any(not s.stopped for s in _registry.values()), timeout=10,
             what="the cancellation subscription to end with its worker")


def test_the_password_in_the_url_adds_and_processes(locked, qname, wait_for):
    url = f"redis+cluster://:{quote(PASSWORD, safe='')}@{_hosts(locked)}/"
    prefix = "{a%s}" % qname
    queue = Queue(qname, connection=url, prefix=prefix)
    done = []
    worker = Worker(qname, lambda job: done.append(job.id) or job.data["i"], connection=url, prefix=prefix,
                    concurrency=2, drain_delay=0.5, lock_duration=2000)  # renewals every second
    worker.start()
    try:
        ids = [queue.add("job", {"i": i}).id for i in range(20)]
        wait_for(lambda: len(done) == 20, timeout=60, what="20 jobs done", details=lambda: str(len(done)))
        assert sorted(done) == sorted(ids)
        assert queue.get_job(ids[3]).returnvalue == 3
        wait_for(lambda: len(queue.get_workers()) == 1, what="getWorkers() to see the worker")
        late = queue.add("late", {"i": 99})  # the marker wait, logged in on its primary, wakes up
        wait_for(lambda: late.id in done, timeout=30, what="a job added to the idle worker")
    finally:
        worker.close(timeout=10)
        queue.close()
    _subscription_ended(wait_for)


def test_the_yaml_mapping_s_user_and_password(locked, qname, wait_for):
    nodes = ", ".join(f'"127.0.0.1:{n.port}"' for n in locked.nodes[:2])
    cfg = parse_config(f"""
redis:
  cluster:
    nodes: [{nodes}]
    username: {USER[0]}
    password: "{USER[1]}"
  socket_timeout: 5
prefix: "{{y{qname}}}"
entry_points: false
queues:
  {qname}: {{concurrency: 2, drain_delay: 0.5, shutdown_timeout: 5}}
""")
    with runner_ran_ten_jobs(cfg, qname, wait_for) as (_runner, queue):
        assert queue.get_job_counts()["completed"] == 10
        # every client connection (the worker's, the queue's) is the ACL user's; the default
        # user is only this CLIENT LIST's and the replicas' (flag S)
        users = set()
        for port in locked.primary_ports():
            admin = redis.Redis(port=port, password=PASSWORD, decode_responses=True)
            users.update(c["user"] for c in admin.client_list() if "S" not in c["flags"] and c["cmd"] != "client|list")
            admin.close()
        assert users == {USER[0]}


def test_a_wrong_password_is_refused_at_once_without_showing_it(locked, qname):
    url = f"redis+cluster://{USER[0]}:not-{USER[0]}s-secret@{_hosts(locked)}/"
    with pytest.raises(RedisClusterException, match="password") as info:
        Queue("{%s}" % qname, connection=url)
    assert "secret" not in str(info.value)


def _user_url(cluster):
    return f"redis+cluster://{USER[0]}:{quote(USER[1], safe='')}@{_hosts(cluster)}/"


def test_a_running_job_is_cancelled_from_another_process(locked, qname, wait_for):
    # the worker subscribes, logged in as the ACL user, on a node of the cluster; the cancel
    # comes from another Python process, whose cancelJob-9 publishes on the queue's primary
    _subscription_ended(wait_for)  # the earlier tests' workers' (their clients are gone)
    url = _user_url(locked)
    prefix = "{c%s}" % qname
    queue = Queue(qname, connection=url, prefix=prefix)
    proc, started, stopped = sleeper_until_cancelled()
    worker = Worker(qname, proc, connection=url, prefix=prefix, drain_delay=0.5, lock_duration=30000)
    worker.start()
    try:
        job = queue.add("long", {}, {"attempts": 3})
        wait_for(lambda: started.is_set() and worker._lifecycle.remote.subscribed > 0, timeout=30,
                 what="the job to run and the worker to subscribe")
        # the subscription is the ACL user's, named, on one of the cluster's nodes
        subscriptions = []
        for port in locked.live_ports():
            admin = redis.Redis(port=port, password=PASSWORD, decode_responses=True)
            subscriptions += [c for c in admin.client_list() if c["name"] == SUBSCRIBER_NAME]
            admin.close()
        assert [c["user"] for c in subscriptions] == [USER[0]], subscriptions
        script = ("import sys, time; from echomq_gevent import Queue; "
                  "q = Queue(sys.argv[1], connection=sys.argv[2], prefix=sys.argv[3]); "
                  "at = time.time(); out = q.cancel_job(sys.argv[4], 'from afar'); "
                  "print(out.outcome, out.state, at)")
        done = subprocess.run([sys.executable, "-c", script, qname, url, prefix, job.id],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outcome, state, at = done.stdout.split()
        assert (outcome, state) == ("accepted", "active")
        wait_for(lambda: queue.get_job_state(job.id) == "failed", timeout=5, what="the job to fail")
        assert [reason for reason, _ in stopped] == ["from afar"]
        assert stopped[0][1] - float(at) < 1.0, "the processor stopped more than a second after the cancel"
        back = queue.get_job(job.id)
        assert back.failed_reason == "job cancelled: from afar" and back.attempts_made == 1  # no retry
    finally:
        worker.close(timeout=10)
        queue.close()
    _subscription_ended(wait_for)


def test_every_node_hears_a_cancel_published_by_the_script(locked, qname):
    # classic PUBLISH from cancelJob-9 is broadcast on the cluster bus: a subscription on a
    # node that does not serve the queue's slot (where a subscriber lands after a
    # connection error) hears it as well as the slot's primary
    url = _user_url(locked)
    prefix = "{b%s}" % qname
    queue = Queue(qname, connection=url, prefix=prefix)
    channel = queue.keys.cancellation_channel()
    job = queue.add("j", {})
    take(queue)  # active, held by a worker that is not running
    listeners = []
    try:
        owner = node_client(queue.client, channel, 0)
        assert owner.connection_pool.connection_kwargs["port"] == locked.owner_of(key_slot(channel))
        owner.close()
        for attempt in range(len(queue.client.get_nodes())):
            client = node_client(queue.client, channel, attempt)
            pubsub = client.pubsub()
            pubsub.subscribe(channel)
            assert pubsub.get_message(timeout=5)["type"] == "subscribe"
            listeners.append((client.connection_pool.connection_kwargs["port"], client, pubsub))
        assert len({port for port, _, _ in listeners}) == len(listeners) >= 3  # each node once
        assert queue.cancel_job(job.id, "to all").outcome == "accepted"
        for port, _, pubsub in listeners:
            msg = pubsub.get_message(timeout=5)
            assert msg and msg["type"] == "message", port
            assert json.loads(msg["data"])["jobId"] == job.id
    finally:
        for _, client, pubsub in listeners:
            pubsub.close()
            client.close()
        queue.close()

"""A Redis Cluster that requires a password (``requirepass`` and ``masterauth``: its
replicas log in too) and has an ACL user: the password in the URL's user part, the
user and password in the YAML ``redis.cluster`` mapping; jobs added and processed end
to end, the blocking and lock-renewal clients and ``getWorkers()`` included."""
from __future__ import annotations

from urllib.parse import quote

import pytest
import redis
from redis.exceptions import RedisClusterException

from echomq_gevent import Queue, Worker
from echomq_gevent.host.config import parse_config
from integration.worker_helpers import runner_ran_ten_jobs
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

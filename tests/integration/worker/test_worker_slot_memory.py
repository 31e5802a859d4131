"""A slot that runs job after job (fetch-next, in one greenlet) keeps only the job it
runs: a finished job, with its data, is free to go."""
from __future__ import annotations

import gc

import gevent

from echomq_gevent.queue.job import Job
from integration.worker_helpers import make_worker, running


def _jobs_alive(job_id: str) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Job and o.id == job_id)


def test_a_slot_running_back_to_back_jobs_lets_the_finished_ones_go(redis_url, prefix, qname, queue, wait_for):
    # a backlog, one slot: the jobs run one after the other in the same greenlet
    ids = [queue.add("big", {"blob": "x" * 100_000, "n": i}).id for i in range(4)]
    seen = {}

    def proc(job):
        if job.id == ids[-1]:  # the slot's fourth job: the first three are done
            seen["greenlets"] = len(greenlets)
            seen["alive"] = [_jobs_alive(i) for i in ids[:3]]
        greenlets.add(id(gevent.getcurrent()))
        return len(job.data["blob"])

    greenlets: set = set()
    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.completed_count == 4, what="the four jobs")
    assert seen["greenlets"] == 1, "the jobs did not run back to back in one slot"
    assert seen["alive"] == [0, 0, 0], f"finished jobs still in memory: {seen['alive']}"


def test_slot_greenlets_record_no_spawning_stack(redis_url, prefix, qname, queue, wait_for):
    """gevent keeps ten frames of where each greenlet was spawned (about 0.6 KB); a slot's
    greenlet, always spawned by the fetch loop, keeps none."""
    import gevent

    from echomq_gevent.worker.slots import SlotGreenlet

    seen = []

    def proc(job):
        seen.append(gevent.getcurrent())
        return None

    queue.add("n", {})
    w = make_worker(redis_url, prefix, qname, proc)
    with running(w):
        wait_for(lambda: w.completed_count == 1, what="the job")
    assert isinstance(seen[0], SlotGreenlet) and seen[0].spawning_stack is None
    assert gevent.Greenlet(lambda: None).spawning_stack is not None  # gevent's own default

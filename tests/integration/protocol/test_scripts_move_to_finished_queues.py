"""moveToFinishedQueues-0 on a real Redis: the finishes of several queues in one call (a
pool's hub turn) leave every queue exactly as the same moveToFinished-14 calls one after
the other, answer each job as its own call would, in the order asked, and an error of one
job leaves the others finished."""
from __future__ import annotations

from echomq_gevent.errors import JobLockMismatch, JobNotExist, JobPendingChildren
from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts
from integration.protocol.test_scripts_move_to_finished_many import _answers, _calls, _scene
from integration.worker_scripts_helpers import queue_state


def _interleaved(a, b):
    """The calls of two queues, interleaved as the finishes of a pool's turn come."""
    out = []
    for x, y in zip(a, b):
        out.extend((x, y))
    return out


def test_finishes_of_several_queues_in_one_call_leave_redis_as_the_calls_one_by_one(r, prefix, qname):
    names = ("a-one", "b-one", "a-many", "b-many")
    keys = {n: QueueKeys(f"{qname}-{n}", prefix) for n in names}
    scripts = {n: Scripts(r, keys[n]) for n in names}
    for n in names:
        _scene(r, keys[n], scripts[n])
    expected = _interleaved(scripts["a-one"].run_many(_calls(scripts["a-one"])),
                            scripts["b-one"].run_many(_calls(scripts["b-one"])))
    # any Scripts of the client sends it: each call carries its own queue's keys
    got = scripts["a-many"].move_to_finished_queues(_interleaved(_calls(scripts["a-many"]),
                                                                 _calls(scripts["b-many"])))
    assert _answers(got) == _answers(expected)
    assert [type(x) for x in got[6:12]] == [JobLockMismatch, JobLockMismatch, JobNotExist, JobNotExist,
                                            JobPendingChildren, JobPendingChildren]
    # each job fetched the next job of its own queue
    assert got[0][1] == "7" and got[1][1] == "7" and got[2][1] == "8" and got[3][1] == "8"
    assert queue_state(r, keys["a-many"]) == queue_state(r, keys["a-one"])
    assert queue_state(r, keys["b-many"]) == queue_state(r, keys["b-one"])


def test_one_queue_alone_is_finished_as_moveToFinishedMany(r, prefix, qname):
    one, many = QueueKeys(qname + "-one", prefix), QueueKeys(qname + "-many", prefix)
    seq, batch = Scripts(r, one), Scripts(r, many)
    _scene(r, one, seq)
    _scene(r, many, batch)
    expected = seq.move_to_finished_many(_calls(seq))
    got = Scripts(r, QueueKeys("elsewhere", prefix)).move_to_finished_queues(_calls(batch))
    assert _answers(got) == _answers(expected)
    assert queue_state(r, many) == queue_state(r, one)

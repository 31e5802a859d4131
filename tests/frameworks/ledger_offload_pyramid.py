"""A Pyramid processor marked atomic that a child of ``offload: process`` imports by name,
for the ledger tests under ``offload: thread`` and ``process``: writes one Order row of the
example shop through the job's ``request.dbsession`` (its email names the job), returns
which run wrote it and where it ran (pid, native thread); ``fail`` raises after the write.
Made atomic without being routed (the test routes it), so importing this module declares
nothing."""
import os
import threading
import uuid

import pyramidshop

from echomq_gevent.contrib.pyramid import job_request
from echomq_gevent.contrib.pyramid.ledger import PyramidAtomicProcessor


def write_order(job):
    """The Order row of ``job`` through the job's request.dbsession; returns the run id
    it names (``fail``: raises after the write)."""
    run = uuid.uuid4().hex
    request = job_request()
    request.dbsession.add(pyramidshop.Order(email=f"{job.id}@ledger", confirmed_by=run))
    request.dbsession.flush()
    if job.data.get("fail"):
        raise RuntimeError("the processor failed after its write")
    return run


def charge(job):
    return {"run": write_order(job), "pid": os.getpid(), "thread": threading.get_native_id()}


charge = PyramidAtomicProcessor(charge)


def main(global_config, **settings):
    """The example shop's app with :func:`charge` routed for the ``orders`` queue's
    ``charge`` jobs (what the worker command test runs)."""
    from echomq_gevent.contrib.pyramid import processor

    processor("orders", "charge")(charge)
    return pyramidshop.main(global_config, **settings)

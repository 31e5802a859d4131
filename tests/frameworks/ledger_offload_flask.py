"""A Flask processor marked atomic that a child of ``offload: process`` imports by name
(the example shop's ``echomq``), for the ledger tests under ``offload: thread`` and
``process``: writes one Order row (its email names the job), returns which run wrote it
and where it ran (pid, native thread); ``fail`` raises after the write. Made atomic
without being routed (the test routes it), so importing this module declares nothing."""
import os
import threading
import uuid

import flaskshop


def charge(job):
    run = uuid.uuid4().hex
    flaskshop.db.session.add(flaskshop.Order(email=f"{job.id}@ledger", confirmed_by=run))
    if job.data.get("fail"):
        raise RuntimeError("the processor failed after its write")
    return {"run": run, "pid": os.getpid(), "thread": threading.get_native_id()}


charge = flaskshop.echomq._atomic(charge, True)


def create_app():
    """The example shop with :func:`charge` routed for the ``orders`` queue's ``charge``
    jobs, run in one child of ``offload: process`` (what the worker command test runs)."""
    app = flaskshop.create_app()
    app.config["ECHOMQ_QUEUES"]["orders"].update(offload="process", offload_processes=1, concurrency=1,
                                                 drain_delay=0.5)
    flaskshop.echomq.init_app(app)
    flaskshop.echomq.processor("orders", "charge")(charge)
    return app

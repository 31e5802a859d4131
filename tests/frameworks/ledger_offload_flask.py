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

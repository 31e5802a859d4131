"""Processors the ledger tests run (importable by name, so ``offload: process`` children
find them): each writes an effect row on Django's default database and returns a value
that says which run wrote it."""
from __future__ import annotations

import os
import uuid

from echomq_gevent.contrib.django.ledger import AtomicProcessor

EFFECTS = "ledger_effects"
CREATE = (f"CREATE TABLE IF NOT EXISTS {EFFECTS} (id INTEGER PRIMARY KEY{{auto}}, job_id VARCHAR(255) NOT NULL, "
          f"run VARCHAR(64) NOT NULL)")


def create_effects(connection) -> None:
    """The effect table, on a Django connection (SQLite or PostgreSQL)."""
    auto = " AUTOINCREMENT" if connection.vendor == "sqlite" else ""
    sql = CREATE.replace("{auto}", auto)
    if connection.vendor == "postgresql":
        sql = sql.replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY")
    with connection.cursor() as cur:
        cur.execute(sql)


def _write(job) -> dict:
    from django.db import connection

    run = uuid.uuid4().hex
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {EFFECTS} (job_id, run) VALUES (%s, %s)", [str(job.id), run])
    work_ms = (job.data or {}).get("work_ms")
    if work_ms:  # the campaign's jobs: some work inside the transaction
        import time

        time.sleep(work_ms / 1000.0)
    if (job.data or {}).get("fail"):
        raise RuntimeError("the processor failed after its write")
    return {"run": run, "pid": os.getpid(), "n": (job.data or {}).get("n")}


def charge(job):
    return _write(job)


charge = AtomicProcessor(charge)


def plain(job):
    """``charge`` without the ledger: its own ``transaction.atomic()`` only (what the
    ledger tests compare against)."""
    from django.db import transaction

    with transaction.atomic():
        return _write(job)


def hold(job):
    """Writes its effect, then (on its first attempt, when the job's data names a file)
    says so and waits inside its transaction until that file exists; then reads once more
    and returns. The database restart test restarts the server meanwhile."""
    import time

    from django.db import connection

    value = _write(job)
    release = (job.data or {}).get("release")
    if release and job.attempts_made == 0:
        print(f"holding {job.id}", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return value


hold = AtomicProcessor(hold)

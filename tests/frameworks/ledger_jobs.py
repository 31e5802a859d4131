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
    if (job.data or {}).get("fail"):
        raise RuntimeError("the processor failed after its write")
    return {"run": run, "pid": os.getpid(), "n": (job.data or {}).get("n")}


def charge(job):
    return _write(job)


charge = AtomicProcessor(charge)

"""The outbox's tables and the effect ledger's as Django models (app label ``echomq_gevent``; created by
``python manage.py migrate``). Rows are written and read with the SQL of
:mod:`echomq_gevent.contrib.outbox.rows`, shared with the SQLAlchemy table; the models
are here for the migration and for looking at the rows (the shell, the admin)."""
from __future__ import annotations

from django.db import models

from ..ledger.core import AGE_INDEX as LEDGER_AGE
from ..ledger.core import TABLE as LEDGER_TABLE
from ..ledger.core import UNIQUE_INDEX as LEDGER_UNIQUE
from ..outbox.rows import LOCK_TABLE, STATE_NAMES, TABLE


class OutboxRow(models.Model):
    """A job waiting in ``echomq_outbox`` for the relay (see ``docs/frameworks.md``)."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    data = models.TextField()
    opts = models.TextField()
    job_id = models.CharField(max_length=255)
    state = models.SmallIntegerField(default=0, choices=sorted(STATE_NAMES.items()))
    created_ms = models.BigIntegerField()
    attempts = models.IntegerField(default=0)
    last_error = models.TextField(default="", blank=True)
    parked_ms = models.BigIntegerField(null=True, blank=True)
    added_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        app_label = "echomq_gevent"
        db_table = TABLE
        indexes = [models.Index(fields=["state", "id"], name="echomq_outbox_state_id")]

    def __str__(self) -> str:
        return f"outbox row {self.id}: {self.queue}/{self.name} ({STATE_NAMES.get(self.state, self.state)})"


class OutboxLock(models.Model):
    """The row the relays lock (or lease) so one relays at a time."""

    name = models.CharField(max_length=64, primary_key=True)
    owner = models.CharField(max_length=255, default="", blank=True)
    lease_until_ms = models.BigIntegerField(default=0)

    class Meta:
        app_label = "echomq_gevent"
        db_table = LOCK_TABLE


class LedgerRow(models.Model):
    """The row of a job whose atomic processor committed (``echomq_ledger``; see
    :mod:`echomq_gevent.contrib.ledger.core`). Written and read with that module's SQL."""

    id = models.BigAutoField(primary_key=True)
    prefix = models.CharField(max_length=255)
    queue = models.CharField(max_length=255)
    job_id = models.CharField(max_length=255)
    job_ts = models.BigIntegerField()
    job_name = models.CharField(max_length=255, default="", blank=True)
    return_value = models.TextField()
    created_ms = models.BigIntegerField()

    class Meta:
        app_label = "echomq_gevent"
        db_table = LEDGER_TABLE
        constraints = [models.UniqueConstraint(fields=["prefix", "queue", "job_id", "job_ts"],
                                               name=LEDGER_UNIQUE)]
        indexes = [models.Index(fields=["created_ms"], name=LEDGER_AGE)]

    def __str__(self) -> str:
        return f"ledger row {self.id}: {self.queue}/{self.job_id} ({self.job_name})"

"""The outbox's pure parts: its settings and their errors, which errors a relay retries
and which park a row, and the job ids rows carry (no database, no Redis)."""
from __future__ import annotations

import json

import pytest
import redis

from echomq_gevent.contrib.outbox import OutboxSettings, outbox_settings
from echomq_gevent.contrib.outbox.adding import is_transient
from echomq_gevent.contrib.outbox.rows import JOB_ID_PREFIX, encode_row, insert_sql, new_job_id
from echomq_gevent.errors import ConfigError


def where(path):
    return "settings.ECHOMQ['outbox']" + "".join(f"[{p!r}]" for p in path)


def test_true_false_and_mappings():
    assert outbox_settings(None, where) == OutboxSettings()
    assert outbox_settings(False, where).enabled is False
    assert outbox_settings(True, where) == OutboxSettings(enabled=True)
    s = outbox_settings({"batch_size": 5, "poll_interval": 2, "keep_days": 1}, where)
    assert (s.enabled, s.batch_size, s.poll_interval, s.keep_days) == (True, 5, 2.0, 1.0)
    assert isinstance(s.poll_interval, float)
    assert outbox_settings({"enabled": False, "batch_size": 5}, where).enabled is False
    assert OutboxSettings().linger == 0.02
    lazy = outbox_settings({"linger": 0}, where)
    assert lazy.linger == 0.0 and isinstance(lazy.linger, float)
    assert OutboxSettings().order == "commit"
    assert outbox_settings({"order": "id"}, where).order == "id"


def test_order_id_writes_postgresql_rows_without_their_notify():
    from echomq_gevent.contrib.outbox import rows

    assert "pg_notify" in rows.insert_sql("postgresql")
    plain = rows.insert_sql("postgresql", notify=False)
    assert "pg_notify" not in plain and plain.startswith("INSERT INTO echomq_outbox ")
    assert rows.insert_sql("sqlite") == rows.insert_sql("sqlite", notify=False) == plain


@pytest.mark.parametrize("value, message", [
    ({"batch_sise": 5}, r"\['batch_sise'\]: unknown outbox option 'batch_sise'; did you mean 'batch_size'\?"),
    ({"batch_size": 0}, r"\['batch_size'\]: must be a whole number from 1 to 10000, got 0"),
    ({"batch_size": True}, r"\['batch_size'\]: must be a whole number"),
    ({"poll_interval": 0}, r"\['poll_interval'\]: must be a number above 0"),
    ({"keep_days": -1}, r"\['keep_days'\]: must be a number from 0 to 3650"),
    ({"linger": 2}, r"\['linger'\]: must be a number from 0 to 1, got 2"),
    ({"linger": "fast"}, r"\['linger'\]: must be a number from 0 to 1"),
    ({"relay": "yes"}, r"\['relay'\]: must be true or false"),
    ({"order": "insert"}, r"\['order'\]: must be one of 'commit', 'id', got 'insert'"),
    ("on", r"settings\.ECHOMQ\['outbox'\]: must be true, false or a mapping"),
])
def test_wrong_values_name_the_setting(value, message):
    with pytest.raises(ConfigError, match=message):
        outbox_settings(value, where)


def test_transient_errors_are_those_a_later_try_may_not_meet():
    assert is_transient(redis.ConnectionError("refused"))
    assert is_transient(redis.TimeoutError("slow"))
    assert is_transient(redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'."))
    assert is_transient(redis.ResponseError("LOADING Redis is loading the dataset in memory"))
    assert is_transient(redis.ResponseError("READONLY You can't write against a read only replica."))
    assert not is_transient(redis.ResponseError("ERR Error running script: user_script:1: bad"))
    assert not is_transient(ValueError("bad option"))


def test_rows_carry_their_job_id():
    a, b = new_job_id(), new_job_id()
    assert a != b and a.startswith(JOB_ID_PREFIX) and len(a) == len(JOB_ID_PREFIX) + 32
    assert ":" not in a
    params = encode_row("orders", "confirm", '{"n":1}', {"attempts": 3})
    assert params[:3] == ("orders", "confirm", '{"n":1}')
    assert json.loads(params[3]) == {"attempts": 3} and params[4].startswith(JOB_ID_PREFIX)
    assert encode_row("orders", "confirm", "{}", {"jobId": "order-7"})[4] == "order-7"


def test_postgresql_inserts_notify_in_the_same_statement():
    assert "pg_notify('echomq_outbox', row.id::text)" in insert_sql("postgresql")
    assert "pg_notify" not in insert_sql("sqlite")

"""The outbox's PostgreSQL driver layer without a database: which connections it can
listen on, how it reads psycopg 3's notifications, when it switches psycopg 3 to a wait
that yields to gevent, and where Django's listening connection comes from."""
from __future__ import annotations

import collections
import sys
import types

import pytest

from echomq_gevent.contrib.outbox import drivers
from echomq_gevent.contrib.outbox.drivers import NotifyReader, cooperative_psycopg, driver_of


def _conn_class(module, **attrs):
    return type("Connection", (), dict(attrs, __module__=module))


Notify = collections.namedtuple("Notify", "channel payload pid")
PGnotify = collections.namedtuple("PGnotify", "relname be_pid extra")


class FakePgconn:
    def __init__(self):
        self.socket_data = []
        self.parsed = collections.deque()
        self.consumed = 0

    def consume_input(self):
        self.consumed += 1
        self.parsed.extend(self.socket_data)
        self.socket_data = []

    def notifies(self):
        return self.parsed.popleft() if self.parsed else None


class FakePsycopg3:
    """What the reader uses of a psycopg 3 connection."""

    def __init__(self):
        self.pgconn = FakePgconn()
        self.info = types.SimpleNamespace(encoding="utf-8")
        self.handlers = []

    def add_notify_handler(self, fn):
        self.handlers.append(fn)


FakePsycopg3.__module__ = "psycopg"


def test_driver_of_tells_the_drivers_apart():
    assert driver_of(_conn_class("psycopg2.extensions", poll=1, notifies=[])()) == "psycopg2"
    assert driver_of(FakePsycopg3()) == "psycopg"
    assert driver_of(_conn_class("psycopg.connection", pgconn=1, add_notify_handler=1)()) == "psycopg"
    assert driver_of(_conn_class("sqlite3")()) is None
    assert driver_of(_conn_class("pg8000.legacy")()) is None
    assert driver_of(_conn_class("psycopgx", pgconn=1, add_notify_handler=1)()) is None


def test_reader_refuses_another_driver():
    with pytest.raises(NotImplementedError, match="psycopg2 or psycopg 3"):
        NotifyReader(_conn_class("sqlite3")())


def test_psycopg3_reader_keeps_the_order_of_what_psycopg_and_the_socket_delivered():
    conn = FakePsycopg3()
    reader = NotifyReader(conn)
    (handler,) = conn.handlers
    handler(Notify("echomq_outbox", "1", 7))  # read by psycopg while it ran the LISTEN
    conn.pgconn.socket_data = [PGnotify(b"echomq_outbox", 7, b"2"), PGnotify(b"other", 7, b"x")]
    assert reader.read() == [("echomq_outbox", "1"), ("echomq_outbox", "2"), ("other", "x")]
    assert conn.pgconn.consumed == 1
    assert reader.read() == []


def test_psycopg2_reader_polls_then_empties_the_list():
    class Conn:
        __module__ = "psycopg2.extensions"

        def __init__(self):
            self.notifies = []
            self.polled = 0

        def poll(self):
            self.polled += 1
            self.notifies.append(Notify("echomq_outbox", "5", 1))

    conn = Conn()
    assert NotifyReader(conn).read() == [("echomq_outbox", "5")]
    assert conn.notifies == [] and conn.polled == 1


@pytest.fixture
def fake_psycopg(monkeypatch):
    """A ``psycopg.waiting`` using its C wait, and gevent's monkey having patched select."""
    def wait_c(gen, fileno, interval=0.0):
        pass

    def wait_poll(gen, fileno, interval=0.0):
        pass

    waiting = types.SimpleNamespace(wait_c=wait_c, wait_poll=wait_poll, wait_select=wait_poll, wait=wait_c,
                                    DefaultSelector=object)
    patched = {"select": True, "selectors": True}
    monkey = types.SimpleNamespace(is_module_patched=lambda name: patched.get(name, False))
    monkeypatch.setitem(sys.modules, "psycopg.waiting", waiting)
    monkeypatch.setitem(sys.modules, "gevent.monkey", monkey)
    monkeypatch.delenv("PSYCOPG_WAIT_FUNC", raising=False)
    monkeypatch.setattr(drivers, "_switched", False)
    return waiting, patched


def test_the_c_wait_of_a_psycopg_imported_before_the_patch_is_switched_once(fake_psycopg, caplog):
    import selectors

    waiting, _patched = fake_psycopg
    assert cooperative_psycopg() is True
    assert waiting.wait is waiting.wait_poll and waiting.DefaultSelector is selectors.DefaultSelector
    assert "psycopg was imported before gevent patched this process" in caplog.text
    assert cooperative_psycopg() is False  # already cooperative


def test_nothing_is_switched_without_a_reason(fake_psycopg, monkeypatch):
    waiting, patched = fake_psycopg
    patched["select"] = False  # gevent did not patch: the C wait is right
    assert cooperative_psycopg() is False and waiting.wait is waiting.wait_c
    patched["select"] = True
    monkeypatch.setenv("PSYCOPG_WAIT_FUNC", "wait_c")  # the user's own choice
    assert cooperative_psycopg() is False and waiting.wait is waiting.wait_c
    monkeypatch.delenv("PSYCOPG_WAIT_FUNC")
    monkeypatch.delitem(sys.modules, "psycopg.waiting")  # not imported: it will choose itself
    assert cooperative_psycopg() is False


def test_django_listening_connection_is_opened_beside_its_pool():
    from echomq_gevent.contrib.django.outbox_db import new_connection

    class Database:
        @staticmethod
        def connect(**params):
            return ("direct", params)

    class Wrapper:
        def __init__(self, options):
            self.settings_dict = {"OPTIONS": options}
            self.Database = Database

        def get_connection_params(self):
            return {"dbname": "shop"}

        def get_new_connection(self, params):
            return ("django", params)

    assert new_connection(Wrapper({})) == ("django", {"dbname": "shop"})
    assert new_connection(Wrapper({"pool": True})) == ("direct", {"dbname": "shop"})

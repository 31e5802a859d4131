"""Helpers of the framework integration tests: a subprocess runner for the example
projects' commands, and the databases of the outbox tests (a throwaway PostgreSQL
cluster for the session, a fresh database or SQLite file per test)."""
from __future__ import annotations

import itertools
import os
import re
import sys
from typing import Dict, List

import pytest

from running_command import RunningCommand

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Command(RunningCommand):
    """A running command (a framework's worker command) with its output collected; the
    checkout and ``cwd`` are on its ``PYTHONPATH``."""

    def __init__(self, argv: List[str], cwd: str, env: Dict[str, str]) -> None:
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, cwd, full_env.get("PYTHONPATH", "")) if p)
        full_env.update(env)
        super().__init__(argv, cwd, full_env)


@pytest.fixture
def command():
    """Start commands with ``command(argv, cwd, env)``; any still running is killed at the end."""
    started: List[Command] = []

    def start(argv: List[str], cwd: str, env: Dict[str, str]) -> Command:
        c = Command(argv, cwd, env)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()


_databases = itertools.count()


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL cluster of the session's own (``tests/pg_server.py``); skipped
    with the reason when PostgreSQL is not installed, failed under CI."""
    from pg_server import pg_or_skip

    server = pg_or_skip()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def outbox_engine_of(request, tmp_path):
    """``make(kind)``: an SQLAlchemy engine on a fresh database with the outbox tables
    created; ``kind`` is ``sqlite`` (a file), ``postgresql`` (the first installed
    driver) or a driver's name (``psycopg2``, ``psycopg``: skipped when not installed)."""
    from sqlalchemy import create_engine

    from echomq_gevent.contrib.outbox.sqlalchemy import metadata

    made = []

    def make(kind):
        if kind == "sqlite":
            url = f"sqlite:///{tmp_path / f'outbox{len(made)}.sqlite3'}"
        else:
            driver = None if kind == "postgresql" else kind
            if driver is not None:
                pytest.importorskip(driver)
            server = request.getfixturevalue("pg_server")
            url = server.create_database(f"outbox{os.getpid()}x{next(_databases)}", driver)
        engine = create_engine(url)
        made.append(engine)
        metadata.create_all(engine)
        return engine
    yield make
    for engine in made:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def outbox_engine(request, outbox_engine_of):
    """An SQLAlchemy engine on a fresh database (a SQLite file, or a new PostgreSQL
    database of the session's cluster) with the outbox tables created."""
    return outbox_engine_of(request.param)


DJANGO_PROJECT = os.path.join(ROOT, "examples", "django_project")


@pytest.fixture(scope="module")
def django_shop(tmp_path_factory):
    """Django set up in this process with the example shop's settings, on a SQLite file
    (migrated); returns the file's path. Django is set up once per process: the first
    module to ask chooses the file (``$SHOP_DB`` when set)."""
    django = pytest.importorskip("django")
    os.environ.setdefault("SHOP_DB", str(tmp_path_factory.mktemp("django") / "shop.sqlite3"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    if DJANGO_PROJECT not in sys.path:
        sys.path.insert(0, DJANGO_PROJECT)
    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return settings.DATABASES["default"]["NAME"]


PYRAMID_APP = os.path.join(ROOT, "examples", "pyramid_app")


@pytest.fixture
def pyramid_ini(tmp_path, redis_url, prefix):
    """``make(url, extra="")``: the example Pyramid shop's ``development.ini`` on database
    ``url``, the test's Redis and prefix, with ``extra`` lines added to ``[app:main]``;
    returns the file's path."""
    def make(url, extra=""):
        with open(os.path.join(PYRAMID_APP, "development.ini"), encoding="utf-8") as fh:
            text = fh.read()
        text = re.sub(r"(?m)^sqlalchemy\.url = .*$", f"sqlalchemy.url = {url}", text)
        text = re.sub(r"(?m)^echomq\.redis_url = .*$", f"echomq.redis_url = {redis_url}", text)
        text = re.sub(r"(?m)^echomq\.prefix = .*$", f"echomq.prefix = {prefix}", text)
        text = text.replace("[app:main]\n", "[app:main]\n" + extra)
        ini = tmp_path / "test.ini"
        ini.write_text(text)
        return str(ini)
    return make


@pytest.fixture
def run_workers(redis_url, wait_for):
    """``run(state, until)``: the workers of an integration's state (its config and
    plugins) run in this process until ``until()`` holds, then drain."""
    def run(state, until, what="the jobs to settle"):
        from echomq_gevent.host.runner import Runner

        runner = Runner(state.cfg, redis_url, extra_plugins=state.plugins)
        runner.start()
        try:
            wait_for(until, what=what)
        finally:
            runner.drain(0)
            runner.wait(10)
    return run

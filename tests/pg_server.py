"""A throwaway PostgreSQL cluster for the tests (and the benchmarks), as
``redis_server.py`` starts Redis.

Binaries: ``$PG_BIN`` (a folder), else ``initdb`` and ``pg_ctl`` on PATH, else the newest
``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql`` package puts them there,
off PATH). The cluster lives in a temporary folder, listens on a free loopback port
with ``trust`` authentication, keeps its socket in that folder and is removed when
stopped. ``initdb`` refuses to run as root: as root the cluster is made and run by the
``postgres`` system user the Debian package creates (``runuser -u postgres``).

:func:`pg_or_skip` is what the fixtures call: when the binaries are missing it skips
with the reason, except under CI (``CI`` set), where it fails: CI installs
``postgresql`` (``.ci/run``), so a missing server there is a broken build.

Either driver serves: :data:`DRIVERS` lists the installed ones (psycopg2 first, the
default of ``url`` and :meth:`PostgresServer.create_database`), and the tests name the
other with ``driver=`` (``psycopg``: psycopg 3).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any, List, Optional

from redis_server import free_port

__all__ = ["PostgresServer", "find_pg_bin", "pg_or_skip", "DRIVERS", "installed"]


def installed(driver: str) -> bool:
    """True when the driver's module (``psycopg2``, ``psycopg``) imports."""
    try:
        __import__(driver)
    except ImportError:
        return False
    return True


#: The drivers installed here, psycopg2 first.
DRIVERS = [d for d in ("psycopg2", "psycopg") if installed(d)]


def connect(dsn: str, **kwargs: Any) -> Any:
    """A DB-API connection by the first installed driver."""
    if not DRIVERS:
        raise RuntimeError("neither psycopg2 nor psycopg is installed")
    module = __import__(DRIVERS[0])
    return module.connect(dsn, **kwargs)


def find_pg_bin() -> Optional[str]:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``."""
    env = os.environ.get("PG_BIN")
    if env:
        return env
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        folder = os.path.dirname(os.path.realpath(on_path))
        if os.path.exists(os.path.join(folder, "postgres")):
            return folder
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


class PostgresServer:
    """One PostgreSQL cluster on a free port; ``dsn`` (libpq) and ``url`` (SQLAlchemy)
    point at its ``postgres`` database as the superuser ``echomq``."""

    user = "echomq"

    def __init__(self, bin_dir: Optional[str] = None) -> None:
        self.bin = bin_dir or find_pg_bin()
        if not self.bin:
            raise RuntimeError("no PostgreSQL binaries: apt-get install postgresql, or set PG_BIN")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="echomq-pg-")
        self.data = os.path.join(self.dir, "data")
        self.as_user: List[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse root
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres")
        self.running = False

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        argv = self.as_user + [os.path.join(self.bin, tool), *args]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                              cwd=self.dir)
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({proc.returncode}):\n"
                               f"{proc.stdout.decode(errors='replace')}")

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str, driver: Optional[str] = None) -> str:
        """The SQLAlchemy URL of ``database`` through ``driver`` (default: the first installed)."""
        driver = driver or (DRIVERS[0] if DRIVERS else "psycopg2")
        return f"postgresql+{driver}://{self.user}@127.0.0.1:{self.port}/{database}"

    def start(self) -> "PostgresServer":
        if not os.path.exists(self.data):
            self._run("initdb", "-D", self.data, "-U", self.user, "-A", "trust", "-E", "UTF8",
                      "--no-sync", "--locale=C")
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._run("pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.dir, "log"),
                  "-w", "-t", "60", "start")
        self.running = True
        return self

    def restart(self) -> None:
        """Stop the server at once (``-m immediate``: open transactions are lost, as in a
        crash) and start it again on the same port and data. A checkpoint first keeps what
        committed (the cluster runs with ``synchronous_commit=off``, which a crash would
        otherwise let lose the last commits)."""
        conn = connect(self.dsn)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("CHECKPOINT")
        finally:
            conn.close()
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", timeout=30)
        self.running = False
        self.start()

    def stop(self) -> None:
        if self.running:
            try:
                self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", timeout=30)
            finally:
                self.running = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def postmaster_pid(self) -> Optional[int]:
        """The server's main process (first line of ``postmaster.pid``), while it runs."""
        try:
            with open(os.path.join(self.data, "postmaster.pid"), encoding="utf-8") as fh:
                return int(fh.readline().strip())
        except (OSError, ValueError):
            return None

    def create_database(self, name: str, driver: Optional[str] = None) -> str:
        """Create database ``name``; returns its SQLAlchemy URL (through ``driver``)."""
        conn = connect(self.dsn)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url_for(name, driver)

    def wait_ready(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                connect(self.dsn, connect_timeout=2).close()
                return
            except Exception as exc:  # OperationalError of either driver
                if type(exc).__name__ != "OperationalError" or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def pg_or_skip() -> PostgresServer:
    """A started cluster; skips (fails under CI) when PostgreSQL or both drivers are missing."""
    import pytest

    reason = None
    if not DRIVERS:
        reason = "neither psycopg2 nor psycopg is installed (pip install -e '.[test]')"
    if reason is None and find_pg_bin() is None:
        reason = "no PostgreSQL server binaries (apt-get install postgresql)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests, but {reason}")
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    server = PostgresServer().start()
    server.wait_ready()
    return server

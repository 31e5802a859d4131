"""Django integration: settings, enqueue on commit, management commands, per-job DB hygiene.

Add the app and declare the queues in the settings::

    INSTALLED_APPS = [..., "echomq_gevent.contrib.django"]
    ECHOMQ = {
        "redis": "redis://127.0.0.1:6379/0",
        "queues": {"emails": {"concurrency": 10}},
    }

``ECHOMQ`` takes the keys of the YAML file (``redis``, ``prefix``, ``plugins``,
``entry_points``, ``logging``, ``defaults``, ``queues``), checked by the same validator,
or ``"config": "conf/worker.yaml"`` to keep them in that file; plus ``"discover"``: the
module name imported from every installed app before the worker starts (default
``"jobs"``), where processors are declared::

    # myapp/jobs.py
    from echomq_gevent.contrib.django import processor

    @processor("emails", "welcome")
    def welcome(job):
        user = User.objects.get(pk=job.data["user_id"])
        ...

Enqueue from views with :func:`enqueue_on_commit` (after the transaction commits,
nothing on rollback) or :func:`enqueue` (now); run the workers with ``python manage.py
echomq_worker``. ``"outbox": True`` (or a mapping of outbox options) makes
:func:`enqueue_on_commit` write the job into the ``echomq_outbox`` table in the
transaction itself; the relay in the worker processes adds it to Redis once it commits
(``echomq_gevent.contrib.outbox``). See ``docs/frameworks.md``.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
from typing import Any, Iterator, List, Mapping, Optional, Tuple

from ...errors import ConfigError
from ...plugins.hookspecs import hookimpl
from ..frameworks import Integration, Processors
from .ledger import atomic_task

__all__ = ["processor", "atomic_task", "queue", "enqueue", "enqueue_on_commit", "integration", "DjangoJobContext",
           "SETTING", "FRAMEWORK_KEYS"]

log = logging.getLogger("echomq_gevent.django")

#: The setting the integration reads.
SETTING = "ECHOMQ"
#: Keys of ``ECHOMQ`` besides the YAML file's.
FRAMEWORK_KEYS = ("config", "discover", "outbox", "ledger")
DEFAULT_DISCOVER = "jobs"

def _atomic(fn: Any, value: Any) -> Any:
    from .ledger import make_atomic

    return make_atomic(fn, value)


#: ``@processor(queue, job_name="*", atomic=False)``: declare a processor in an app's
#: ``jobs`` module (``atomic=True``: through the effect ledger, :mod:`.ledger`).
processor = Processors("echomq_gevent.contrib.django.processors", atomic=_atomic)

_integration: Optional[Integration] = None
#: the outbox of settings.ECHOMQ['outbox'] (None when it is off)
_outbox: Any = None
OUTBOX_KEY = "django"


def _where(path: Tuple[Any, ...]) -> str:
    return f"settings.{SETTING}" + "".join(f"[{p!r}]" for p in path)


def _settings_values() -> Tuple[Mapping[str, Any], Optional[str], str]:
    values, config_path, discover, _outbox_value = _settings_all()
    return values, config_path, discover


def _ledger_value() -> Any:
    from django.conf import settings

    values = getattr(settings, SETTING, None)
    return values.get("ledger") if isinstance(values, Mapping) else None


def _settings_all() -> Tuple[Mapping[str, Any], Optional[str], str, Any]:
    from django.conf import settings

    values = getattr(settings, SETTING, None)
    if values is None:
        raise ConfigError(f"settings.{SETTING} is not set: add ECHOMQ = {{'redis': 'redis://host:6379/0', "
                          f"'queues': {{'default': {{}}}}}} (or {{'config': 'path/to/worker.yaml'}}) to the "
                          f"Django settings")
    if not isinstance(values, Mapping):
        raise ConfigError(f"settings.{SETTING} must be a dict, got {type(values).__name__}")
    discover = values.get("discover", DEFAULT_DISCOVER)
    if not isinstance(discover, str) or not discover.isidentifier():
        raise ConfigError(f"{_where(('discover',))} must be a module name such as 'jobs', got {discover!r}")
    rest = {k: v for k, v in values.items() if k not in FRAMEWORK_KEYS}
    return rest, values.get("config"), discover, values.get("outbox")


def integration() -> Integration:
    """The validated configuration from ``settings.ECHOMQ`` (built once per process).
    Raises ConfigError naming the setting that is wrong."""
    global _integration, _outbox
    if _integration is None:
        values, config_path, _discover, outbox_value = _settings_all()
        cfg = Integration.config_from(values, f"settings.{SETTING}", _where, config_path=config_path,
                                      config_setting=_where(("config",)))
        setting = f"{config_path}: queues" if config_path else _where(("queues",))
        state = Integration(cfg, setting, [DjangoJobContext(), processor])
        from ..ledger.settings import ledger_settings

        state.ledger = ledger_settings(_ledger_value(), lambda path: _where(("ledger",) + tuple(path)))
        _outbox = _make_outbox(state, outbox_value)
        state.outbox = _outbox  # what the status command reads
        _integration = state
    return _integration


def _make_outbox(state: Integration, value: Any) -> Any:
    """The registered outbox of ``settings.ECHOMQ['outbox']``, or None when it is off."""
    from ..outbox import outbox_settings
    from ..outbox.registry import Outbox, register, unregister

    opts = outbox_settings(value, lambda path: _where(("outbox",) + tuple(path)))
    if not opts.enabled:
        unregister(OUTBOX_KEY)
        return None
    alias = opts.database or "default"

    def make_db() -> Any:
        from .outbox_db import DjangoDb

        return DjangoDb(alias)
    return register(Outbox(OUTBOX_KEY, opts, make_db, state.queue, f"Django outbox (database {alias!r})"))


def outbox() -> Any:
    """The :class:`~echomq_gevent.contrib.outbox.registry.Outbox` of the settings, or
    ``None`` when ``settings.ECHOMQ['outbox']`` does not switch it on."""
    integration()
    return _outbox


def reset() -> None:
    """Forget the configuration read from the settings (after they changed, e.g. in tests)."""
    global _integration, _outbox
    _integration = None
    if _outbox is not None:
        from ..outbox.registry import unregister

        unregister(OUTBOX_KEY)
    _outbox = None


def queue(name: str) -> Any:
    """The shared :class:`~echomq_gevent.queue.Queue` for a queue the settings declare."""
    return integration().queue(name)


def enqueue(queue_name: str, name: str, data: Any = None, opts: Optional[Mapping[str, Any]] = None) -> Any:
    """Add a job now (not tied to a transaction); returns the Job."""
    return integration().enqueue(queue_name, name, data, opts)


def enqueue_on_commit(queue_name: str, name: str, data: Any = None, opts: Optional[Mapping[str, Any]] = None,
                      using: Optional[str] = None) -> Optional[str]:
    """Add a job once the current transaction of database ``using`` commits.

    Inside ``transaction.atomic()`` the job goes out after the outermost block commits
    (Django's ``transaction.on_commit``), and not at all when it rolls back (a savepoint
    rolled back drops the jobs asked for inside it). Outside a transaction (autocommit)
    it goes out at once. The queue name, job options and data are checked now.

    With the outbox on, the job is written into ``echomq_outbox`` in that transaction
    instead, and the relay adds it once the transaction commits; returns the job id it
    will have (``opts['jobId']``, else ``outbox-<32 hex>``). Off, returns None.
    """
    from django.db import transaction

    state = integration()
    box = _outbox
    if box is None:
        send = state.deferred(queue_name, name, data, opts)
        transaction.on_commit(send, using=using)
        return None
    alias = box.settings.database or "default"
    if using is not None and using != alias:
        raise ValueError(f"enqueue_on_commit(using={using!r}): the outbox table is in database {alias!r} "
                         f"({_where(('outbox', 'database'))}); a row cannot join a transaction of {using!r}")
    from ..outbox.rows import encode_row
    from .outbox_db import write_row

    params = encode_row(queue_name, name, state.checked(queue_name, name, data, opts), opts)
    write_row(alias, params, notify=box.settings.notifies)
    transaction.on_commit(box.wake, using=alias)
    return params[4]


def discover_modules() -> List[Any]:
    """Import the ``discover`` module (default ``jobs``) of every installed app that has
    one; returns the modules. An app module that exists but fails to import raises
    ConfigError naming it."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    _values, _path, discover = _settings_values()
    found = []
    for app in apps.get_app_configs():
        if not module_has_submodule(app.module, discover):
            continue
        name = f"{app.name}.{discover}"
        try:
            found.append(importlib.import_module(name))
        except Exception as exc:
            raise ConfigError(f"{_where(('discover',))}: the module {name} cannot be imported: "
                              f"{type(exc).__name__}: {exc}") from exc
    return found


def worker_plugins() -> List[Any]:
    """The plugins a worker of this Django project runs with: the per-job DB hygiene,
    the processor table, the tasks of ``settings.TASKS`` (when it names
    ``EchoMQBackend``), the outbox's relay and every discovered app module (which may
    implement hooks)."""
    from .task_worker import worker_plugins as task_plugins

    modules = discover_modules()
    state = integration()
    extra: List[Any] = task_plugins(list(state.cfg.queues))  # settings.TASKS's tasks
    if outbox() is not None:
        from ..outbox.registry import RelayPlugin

        extra.append(RelayPlugin())
    extra += _ledger_pruners(state, extra)
    return state.plugins + extra + [m for m in modules]


def _ledger_pruners(state: Integration, task_plugins: List[Any]) -> List[Any]:
    """One pruner per database the atomic processors and tasks of this project write
    their ledger rows to (none when nothing is atomic)."""
    from ..ledger.pruner import LedgerPruner
    from .ledger import DjangoLedgerDb, ledger_alias
    from .task_worker import atomic_aliases

    aliases = {ledger_alias(getattr(fn, "alias", None)) for _q, _n, fn in processor.atomic_routes()}
    aliases |= {ledger_alias(a) for a in atomic_aliases(task_plugins)}
    pruners = []
    for alias in sorted(aliases):
        db = DjangoLedgerDb(alias)
        pruners.append(LedgerPruner(lambda db=db: db, state.ledger, db.label, after=db.close))
    return pruners


@contextlib.contextmanager
def job_database_scope() -> Iterator[None]:
    """Around each job, Django's request rules for database connections: stale or broken
    connections are closed before the job (``close_old_connections``); after it, a
    transaction the job left open is rolled back and the same rules close the
    connection (with the default ``CONN_MAX_AGE = 0``, always)."""
    from django.db import close_old_connections, connections

    if any(conn.in_atomic_block for conn in _open_connections(connections)):
        # a transaction this job did not open: the caller's (a test's TestCase shares its
        # thread's connection with the jobs a drain runs in an unpatched process); leave it
        yield
        return
    close_old_connections()
    try:
        yield
    finally:
        for conn in _open_connections(connections):
            try:
                if conn.in_atomic_block:
                    log.error("a job left a transaction.atomic() block of database %r open; closing its "
                              "connection (the transaction rolls back)", conn.alias)
                    conn.close()
                    conn.in_atomic_block = False
                    conn.savepoint_ids = []
                    conn.needs_rollback = False
                elif not conn.get_autocommit():
                    conn.rollback()
                    conn.set_autocommit(True)
            except Exception:
                log.exception("cleaning the connection of database %r after a job failed; closing it", conn.alias)
                conn.close()
        close_old_connections()


def _open_connections(connections: Any) -> List[Any]:
    try:
        conns = connections.all(initialized_only=True)  # Django >= 4.1
    except TypeError:
        conns = connections.all()
    return [c for c in conns if c.connection is not None]


class DjangoJobContext:
    """Plugin: every job runs inside :func:`job_database_scope`."""

    __name__ = "echomq_gevent.contrib.django.context"

    @hookimpl
    def echomq_job_context(self, worker: Any, job: Any) -> Any:
        return job_database_scope()

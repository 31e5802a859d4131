"""Pyramid integration: ``config.include``, ``.ini`` settings, ``request.enqueue_job``.

::

    # development.ini
    [app:main]
    use = egg:shop
    pyramid.includes = pyramid_tm echomq_gevent.contrib.pyramid
    echomq.redis_url = redis://127.0.0.1:6379/0
    echomq.queues.emails.concurrency = 10

    # a view: with pyramid_tm the job is added after the request's transaction
    # commits (nothing when it aborts); without it, at once
    request.enqueue_job("emails", "welcome", {"user_id": user.id})

    # processors, in a module the app imports (config.scan() does)
    from echomq_gevent.contrib.pyramid import processor, job_request

    @processor("emails", "welcome")
    def welcome(job):
        request = job_request()        # a request of the app; request.tm is committed after
        user = request.dbsession.get(User, job.data["user_id"])

Run the workers with ``python -m echomq_gevent.contrib.pyramid development.ini`` (or
``... development.ini status``). Settings: ``echomq.redis_url``, ``echomq.prefix``,
``echomq.plugins``, ``echomq.plugin_paths``, ``echomq.entry_points``,
``echomq.logging.level|format``, ``echomq.defaults.<option>``, ``echomq.queues`` (names
without options) and ``echomq.queues.<name>.<option>``; or ``echomq.config``: a YAML
file to read instead. Values are typed as in YAML (``5``, ``true``).
``echomq.outbox = true`` (and ``echomq.outbox.<option>``) makes ``request.enqueue_job``
write the job into the ``echomq_outbox`` table through the request's session
(``request.dbsession``), in the request's transaction; the relay in the worker
processes adds it once it commits. See ``docs/frameworks.md``.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from ...errors import ConfigError
from ...plugins.hookspecs import hookimpl
from ..frameworks import Integration, Processors, typed_ini_value

__all__ = ["includeme", "processor", "job_request", "integration", "request_scope", "SETTINGS_PREFIX", "INI_ENV"]

SETTINGS_PREFIX = "echomq."
OUTBOX_SETTING = "echomq.outbox"
#: ``echomq.ledger.<option>``: how the effect ledger's rows are kept (:mod:`.ledger`)
LEDGER_SETTING = "echomq.ledger"
#: where the relay finds its engine: ``sqlalchemy.engine_from_config(settings, prefix)``
ENGINE_PREFIX_SETTING = "echomq.outbox.engine_prefix"
REGISTRY_KEY = "echomq_gevent"
#: the environment variable a child of ``offload: process`` loads the app from (the
#: ``.ini`` file the worker command was given, which sets it)
INI_ENV = "ECHOMQ_PYRAMID_INI"
#: settings whose value is a whitespace-separated list
LIST_KEYS = ("plugins", "plugin_paths")

#: ``@processor(queue, job_name="*", atomic=False)``: declare a processor (``atomic=True``:
#: through the effect ledger, :mod:`.ledger`)
processor = Processors("echomq_gevent.contrib.pyramid.processors", atomic=lambda fn, value: _atomic(fn, value))


def _atomic(fn: Any, value: Any) -> Any:
    """``@processor(..., atomic=True)``: ``fn`` run once through the effect ledger, in the
    job's request transaction (:mod:`.ledger`)."""
    if value is not True:
        raise TypeError(f"@processor(..., atomic=...) takes True (the job's request.dbsession), got {value!r}")
    from .ledger import PyramidAtomicProcessor

    return PyramidAtomicProcessor(fn)


def _where(path: Tuple[Any, ...]) -> str:
    if not path:
        return "the echomq.* settings"
    if path[0] == "redis":
        return "echomq.redis_url"
    if path[0] in LIST_KEYS:
        return SETTINGS_PREFIX + path[0]
    return SETTINGS_PREFIX + ".".join(str(p) for p in path)


def values_from_settings(settings: Mapping[str, Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """The YAML-shaped values of the ``echomq.*`` settings, and ``echomq.config``."""
    values: Dict[str, Any] = {}
    config_path = None
    for key in sorted(settings):
        if not key.startswith(SETTINGS_PREFIX) or key == OUTBOX_SETTING or key.startswith(OUTBOX_SETTING + ".") \
                or key.startswith(LEDGER_SETTING + "."):
            continue
        raw = settings[key]
        parts = key[len(SETTINGS_PREFIX):].split(".")
        if parts == ["config"]:
            config_path = str(raw).strip()
            continue
        if parts == ["redis_url"]:
            values["redis"] = str(raw).strip()
            continue
        if len(parts) == 1 and parts[0] in LIST_KEYS:
            values[parts[0]] = str(raw).split() if isinstance(raw, str) else raw
            continue
        if parts == ["queues"]:
            queues = values.setdefault("queues", {})
            if not isinstance(queues, dict):
                raise ConfigError(f"{key}: must be queue names separated by spaces, got {raw!r}")
            for name in str(raw).split():
                queues.setdefault(name, {})
            continue
        node = values
        for i, part in enumerate(parts[:-1]):
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{SETTINGS_PREFIX}{'.'.join(parts[:i + 1])} is set both as a value and as "
                                  f"a group ({key}); keep one")
            node = nxt
        node[parts[-1]] = typed_ini_value(raw) if isinstance(raw, str) else raw
    return values, config_path


def integration_from_settings(settings: Mapping[str, Any], registry: Any = None) -> Integration:
    values, config_path = values_from_settings(settings)
    cfg = Integration.config_from(values, "the echomq.* settings", _where, config_path=config_path,
                                  config_setting="echomq.config")
    setting = f"{config_path}: queues" if config_path else "echomq.queues"
    plugins = [PyramidJobContext(registry), processor] if registry is not None else [processor]
    state = Integration(cfg, setting, plugins)
    if registry is not None:  # what atomic processors prepare their start check's (and a thread's) request with
        state.bind_atomic = lambda fn: fn.bind(registry)
        for _queue, _name, fn in processor.atomic_routes():
            fn.bind(registry)
    state.outbox = _outbox(settings, state, getattr(registry, "__name__", "") if registry is not None else "")
    if state.outbox is not None:
        from ..outbox.registry import RelayPlugin

        state.plugins.append(RelayPlugin())
    from .ledger import ledger_pruner

    state.plugins.append(ledger_pruner(settings, state, outbox_values(settings)[1]))
    return state


def outbox_values(settings: Mapping[str, Any]) -> Tuple[Any, str]:
    """The outbox's value (``echomq.outbox`` and ``echomq.outbox.<option>``) and the
    engine prefix of the relay (``echomq.outbox.engine_prefix``, default ``sqlalchemy.``)."""
    value: Any = None
    options: Dict[str, Any] = {}
    prefix = "sqlalchemy."
    for key, raw in settings.items():
        typed = typed_ini_value(raw) if isinstance(raw, str) else raw
        if key == OUTBOX_SETTING:
            value = typed
        elif key == ENGINE_PREFIX_SETTING:
            prefix = str(raw).strip()
        elif key.startswith(OUTBOX_SETTING + "."):
            options[key[len(OUTBOX_SETTING) + 1:]] = typed
    if options:
        if value is False:
            options["enabled"] = False
        elif value not in (None, True):
            raise ConfigError(f"{OUTBOX_SETTING}: must be true or false, got {value!r}")
        return options, prefix
    return value, prefix


def _outbox(settings: Mapping[str, Any], state: Integration, app_name: str) -> Any:
    from ..outbox import outbox_settings
    from ..outbox.registry import Outbox, register, unregister

    value, engine_prefix = outbox_values(settings)
    opts = outbox_settings(value, lambda path: ".".join([OUTBOX_SETTING, *map(str, path)]))
    key = f"pyramid:{app_name}"  # the app's registry name: loading the app again replaces it
    if not opts.enabled:
        unregister(key)
        return None
    if not any(k.startswith(engine_prefix) for k in settings):
        raise ConfigError(f"{OUTBOX_SETTING}: the relay builds its engine from the {engine_prefix}* settings "
                          f"(sqlalchemy.engine_from_config), and none is set; set {engine_prefix}url or "
                          f"{ENGINE_PREFIX_SETTING}")
    engine_settings = {k: v for k, v in settings.items() if k.startswith(engine_prefix)}
    make_db = sqlalchemy_db(engine_settings, engine_prefix, "the outbox of the Pyramid app")
    label = f"Pyramid app {app_name!r} outbox" if app_name else "Pyramid app outbox"
    return register(Outbox(key, opts, make_db, state.queue, label))


def sqlalchemy_db(engine_settings: Mapping[str, Any], engine_prefix: str, label: str) -> Callable[[], Any]:
    """``make_db`` of the outbox's relay and the ledger's pruning: a
    :class:`~echomq_gevent.contrib.outbox.sqlalchemy.SqlAlchemyDb` on an engine of
    ``engine_settings`` (``sqlalchemy.engine_from_config``), made once per process (after
    any fork)."""
    engine: Dict[str, Any] = {}

    def make_db() -> Any:
        from sqlalchemy import engine_from_config

        from ..outbox.sqlalchemy import SqlAlchemyDb

        if engine.get("pid") != os.getpid():
            engine.update(pid=os.getpid(), engine=engine_from_config(engine_settings, engine_prefix))
        return SqlAlchemyDb(engine["engine"], label)
    return make_db


def includeme(config: Any) -> None:
    """``config.include("echomq_gevent.contrib.pyramid")``: check the ``echomq.*``
    settings (ConfigError naming the setting), keep the integration in the registry and
    add ``request.enqueue_job`` and ``request.echomq``."""
    state = integration_from_settings(config.get_settings(), config.registry)
    config.registry[REGISTRY_KEY] = state
    config.add_request_method(lambda request: request.registry[REGISTRY_KEY], "echomq", reify=True)
    config.add_request_method(enqueue_job, "enqueue_job")


def integration(registry: Any) -> Integration:
    try:
        return registry[REGISTRY_KEY]
    except KeyError:
        raise RuntimeError("config.include('echomq_gevent.contrib.pyramid') was not called for this app") from None


def enqueue_job(request: Any, queue: str, name: str, data: Any = None,
                opts: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """``request.enqueue_job(queue, name, data, opts)``: with ``pyramid_tm`` the job is
    added after the request's transaction commits (none when it aborts or is doomed);
    without it, at once. The queue, job options and data are checked now.

    With ``echomq.outbox`` on, the job is written into ``echomq_outbox`` through the
    request's session (``echomq.outbox.session``, default ``request.dbsession``) in the
    request's transaction, and the relay adds it once that commits; returns the job id
    it will have. Off, returns None."""
    state = integration(request.registry)
    if state.outbox is not None:
        return _enqueue_outbox(request, state, queue, name, data, opts)
    send = state.deferred(queue, name, data, opts)
    tm = _request_tm(request)
    if tm is None:
        send()
        return None

    def after_commit(committed: bool) -> None:
        if committed:
            send()
    tm.get().addAfterCommitHook(after_commit)


def _enqueue_outbox(request: Any, state: Integration, queue: str, name: str, data: Any,
                    opts: Optional[Mapping[str, Any]]) -> str:
    from ..frameworks import enqueue_after_commit
    from ..outbox.rows import encode_row
    from ..outbox.sqlalchemy import write_row

    box = state.outbox
    attr = box.settings.session
    session = getattr(request, attr, None)
    if session is None:
        raise ConfigError(f"echomq.outbox.session: the request has no {attr!r} (the SQLAlchemy session the "
                          f"outbox row is written with); add that request method or name yours")
    params = encode_row(queue, name, state.checked(queue, name, data, opts), opts)
    real = write_row(session, params, notify=box.settings.notifies)
    tm = _request_tm(request)
    if tm is None:
        enqueue_after_commit(real, box.wake)
        return params[4]
    try:
        from zope.sqlalchemy import mark_changed
    except ImportError:  # pragma: no cover - pyramid_tm apps use zope.sqlalchemy
        mark_changed = None
    if mark_changed is not None:
        mark_changed(real, transaction_manager=tm)  # a raw insert alone would leave it read-only

    def after_commit(committed: bool) -> None:
        if committed:
            box.wake()
    tm.get().addAfterCommitHook(after_commit)
    return params[4]


def _request_tm(request: Any) -> Any:
    try:
        return request.tm
    except AttributeError:
        return None


def job_request() -> Any:
    """The request the current job runs with (``pyramid.threadlocal``)."""
    from pyramid.threadlocal import get_current_request

    return get_current_request()


class PyramidJobContext:
    """Plugin: each job runs with a request of the app (``pyramid.scripting.prepare``:
    registry, request and threadlocals as in ``pshell``); with ``pyramid_tm`` the job
    runs in ``request.tm``'s transaction, committed when the job returns and aborted when
    it raises (or is doomed), so a failing job leaves no open transaction."""

    def __init__(self, registry: Any) -> None:
        self.__name__ = f"echomq_gevent.contrib.pyramid.context.{id(self):x}"
        self.registry = registry

    @hookimpl
    def echomq_job_context(self, worker: Any, job: Any) -> Any:
        return request_scope(self.registry, job)


@contextlib.contextmanager
def request_scope(registry: Any, job: Any) -> Iterator[Any]:
    """A request of the app for ``job`` (``pyramid.scripting.prepare``), current on the
    calling greenlet or thread while the block runs; with ``pyramid_tm`` the block runs
    in ``request.tm``'s transaction, committed on a clean exit unless doomed, aborted on
    an exception. Yields the request. Entered on the job's greenlet by
    :class:`PyramidJobContext`, and by a processor marked atomic where the processor runs
    without it (``offload: thread`` or ``process``)."""
    from pyramid.scripting import prepare

    env = prepare(registry=registry)
    request = env["request"]
    request.echomq_job = job
    try:
        tm = _request_tm(request)
        if tm is None:
            yield request
            return
        tm.begin()
        try:
            yield request
        except BaseException:
            tm.abort()
            raise
        if tm.isDoomed():
            tm.abort()
        else:
            tm.commit()
    finally:
        env["closer"]()

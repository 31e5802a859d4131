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
file to read instead. Values are typed as in YAML (``5``, ``true``). See
``docs/frameworks.md``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from ...errors import ConfigError
from ...plugins.hookspecs import hookimpl
from ..frameworks import Integration, Processors, typed_ini_value

__all__ = ["includeme", "processor", "job_request", "integration", "SETTINGS_PREFIX"]

SETTINGS_PREFIX = "echomq."
REGISTRY_KEY = "echomq_gevent"
#: settings whose value is a whitespace-separated list
LIST_KEYS = ("plugins", "plugin_paths")

#: ``@processor(queue, job_name="*")``: declare a processor
processor = Processors("echomq_gevent.contrib.pyramid.processors")


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
        if not key.startswith(SETTINGS_PREFIX):
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
    return Integration(cfg, setting, plugins)


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
                opts: Optional[Mapping[str, Any]] = None) -> None:
    """``request.enqueue_job(queue, name, data, opts)``: with ``pyramid_tm`` the job is
    added after the request's transaction commits (none when it aborts or is doomed);
    without it, at once. The queue, job options and data are checked now."""
    send = integration(request.registry).deferred(queue, name, data, opts)
    tm = _request_tm(request)
    if tm is None:
        send()
        return

    def after_commit(committed: bool) -> None:
        if committed:
            send()
    tm.get().addAfterCommitHook(after_commit)


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
        return self._scope(job)

    @contextlib.contextmanager
    def _scope(self, job: Any) -> Iterator[None]:
        from pyramid.scripting import prepare

        env = prepare(registry=self.registry)
        request = env["request"]
        request.echomq_job = job
        try:
            tm = _request_tm(request)
            if tm is None:
                yield
                return
            tm.begin()
            try:
                yield
            except BaseException:
                tm.abort()
                raise
            if tm.isDoomed():
                tm.abort()
            else:
                tm.commit()
        finally:
            env["closer"]()

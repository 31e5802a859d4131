"""The effect ledger in the Pyramid integration: ``@processor(queue, name, atomic=True)``.

The job runs with a request of the app (``PyramidJobContext``). With ``pyramid_tm`` the
request's transaction (``request.tm``) is the ledger's: the processor's writes through
``request.dbsession`` and the job's ledger row are written in it, and the job context
commits it once the processor returned (an aborted or doomed transaction commits
neither). A delivery that finds the row answers the stored value; a second delivery's
row refused by the unique key aborts the request's transaction (its writes with it) and
answers the first's value. Without ``pyramid_tm`` the ledger begins and commits
``request.dbsession`` itself, as for Flask.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, Iterator, Mapping

from ...errors import ConfigError
from ..ledger.core import run_once
from ..outbox.sqlalchemy import ConnExec, session_of

__all__ = ["PyramidAtomicProcessor", "TmLedgerDb", "SESSION_ATTR", "ledger_pruner", "loaded_registry"]

#: the request attribute of the session a ledgered processor writes with
SESSION_ATTR = "dbsession"


class TmLedgerDb:
    """``request.dbsession`` inside ``request.tm``'s transaction, as the ledger uses it."""

    def __init__(self, session: Any, tm: Any) -> None:
        self.session = session_of(session)
        self.tm = tm
        self.label = "request.dbsession (pyramid_tm)"

    @contextlib.contextmanager
    def atomic(self) -> Iterator[ConnExec]:
        from ..ledger.sqlalchemy import ledger_table

        try:
            yield ConnExec(self.session.connection(bind_arguments={"clause": ledger_table.select()}))
        except BaseException:
            # the attempt's writes go with the request's transaction; a fresh one follows
            self.tm.abort()
            self.tm.begin()
            raise
        try:
            from zope.sqlalchemy import mark_changed
        except ImportError:  # pragma: no cover - pyramid_tm apps use zope.sqlalchemy
            return
        mark_changed(self.session, transaction_manager=self.tm)  # a raw insert alone leaves it read-only

    def is_conflict(self, exc: BaseException) -> bool:
        from sqlalchemy.exc import IntegrityError

        return isinstance(exc, IntegrityError)


class PyramidAtomicProcessor:
    """A processor run once through the ledger on the job's request: the one the job's
    greenlet prepared, or, where the processor runs without it (a native thread of
    ``offload: thread``, a child of ``offload: process``), a request of its own from the
    app's registry, in its own ``request.tm`` transaction."""

    #: what :meth:`~echomq_gevent.contrib.frameworks.Processors.atomic_routes` looks for
    echomq_ledgered = True
    #: the app's registry (bound by the integration, at its start at the latest), for the
    #: start check and the request of a processor run away from the job's greenlet
    registry: Any = None

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        #: ``module.qualified.name`` of the function (what errors and logs name)
        self.name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"

    def __repr__(self) -> str:
        return f"<atomic processor {self.name}>"

    def _what(self) -> str:
        return f"the processor {self.name}"

    def bind(self, registry: Any) -> None:
        """Called by the integration (when it is built, and at the workers' start): the
        app this processor's requests come from (the last one built, in a process that
        builds several)."""
        self.registry = registry

    def __call__(self, job: Any) -> Any:
        from . import job_request, request_scope

        request = job_request()
        if request is not None:
            return self._run(request, job)
        with request_scope(self._app_registry(), job) as own:  # offload: thread or process
            return self._run(own, job)

    def _run(self, request: Any, job: Any) -> Any:
        from ..ledger.sqlalchemy import SessionLedgerDb
        from . import _request_tm

        session = getattr(request, SESSION_ATTR, None)
        if session is None:
            raise ConfigError(f"{self._what()} is marked atomic, but the app's requests have no "
                              f"request.{SESSION_ATTR} (the SQLAlchemy session it writes with): add that request "
                              f"method")
        tm = _request_tm(request)
        db = TmLedgerDb(session, tm) if tm is not None else SessionLedgerDb(session, f"request.{SESSION_ATTR}")
        return run_once(db, self.fn, job)

    def _app_registry(self) -> Any:
        """The registry a request of its own is prepared from: the bound one, else (a child
        of ``offload: process``) the app loaded from the ``.ini`` of ``INI_ENV``."""
        if self.registry is None:
            self.registry = loaded_registry(self._what())
        return self.registry

    def check(self) -> None:
        """At start: ConfigError naming the processor when the app's requests have no
        ``dbsession`` or its database has no ledger table, or when no app is there to
        run it with (no integration built in this process and no ``INI_ENV``)."""
        from pyramid.scripting import prepare

        from ..ledger.sqlalchemy import check_table

        env = prepare(registry=self._app_registry())
        try:
            session = getattr(env["request"], SESSION_ATTR, None)
            if session is None:
                raise ConfigError(f"{self._what()} is marked atomic, but the app's requests have no "
                                  f"request.{SESSION_ATTR} (the SQLAlchemy session it writes with): add that "
                                  f"request method")
            check_table(session, self._what(), f"request.{SESSION_ATTR}")
        finally:
            env["closer"]()


#: the registries of the apps loaded in this process by :func:`loaded_registry`, by ``.ini``
_LOADED: Dict[str, Any] = {}


def loaded_registry(what: str) -> Any:
    """The registry of the app named by ``INI_ENV`` (the worker command's ``.ini``), loaded
    once per process as ``pshell`` loads it: for a processor marked atomic in a child of
    ``offload: process``. ConfigError naming ``what`` when the variable is not set."""
    import os

    from . import INI_ENV

    uri = os.environ.get(INI_ENV)
    if not uri:
        raise ConfigError(f"{what} is marked atomic and runs in a process without the Pyramid app (a child of "
                          f"offload: process, or a worker not started by python -m echomq_gevent.contrib.pyramid), "
                          f"and {INI_ENV} is not set: run the worker with python -m echomq_gevent.contrib.pyramid "
                          f"INI, or set {INI_ENV} to the app's .ini file")
    if uri not in _LOADED:
        from pyramid.paster import bootstrap

        env = bootstrap(uri)
        env["closer"]()  # the registry stays; the threadlocals it pushed go
        _LOADED[uri] = env["registry"]
    return _LOADED[uri]


def ledger_pruner(settings: Mapping[str, Any], state: Any, engine_prefix: str) -> Any:
    """The worker processes' pruning of the ledger table: ``echomq.ledger.keep_days`` and
    ``echomq.ledger.prune_interval`` (checked into ``state.ledger``), on an engine of the
    ``engine_prefix`` settings (``sqlalchemy.*``, as the outbox's relay), made once per
    process; active once a processor is marked atomic."""
    from ..frameworks import typed_ini_value
    from ..ledger.pruner import LedgerPruner
    from ..ledger.settings import ledger_settings
    from . import LEDGER_SETTING, processor, sqlalchemy_db

    options = {key[len(LEDGER_SETTING) + 1:]: typed_ini_value(raw) if isinstance(raw, str) else raw
               for key, raw in settings.items() if key.startswith(LEDGER_SETTING + ".")}
    state.ledger = ledger_settings(options or None, lambda path: ".".join([LEDGER_SETTING, *map(str, path)]))
    engine_settings = {k: v for k, v in settings.items() if k.startswith(engine_prefix)}
    make_db = sqlalchemy_db(engine_settings, engine_prefix, "the ledger of the Pyramid app")
    return LedgerPruner(make_db, state.ledger, "the Pyramid app",
                        active=lambda: bool(engine_settings) and bool(processor.atomic_routes()))

"""Flask integration: an extension with the app-factory pattern.

::

    from echomq_gevent.contrib.flask import EchoMQ

    echomq = EchoMQ()                     # module level, like db = SQLAlchemy()

    def create_app():
        app = Flask(__name__)
        app.config["ECHOMQ_REDIS_URL"] = "redis://127.0.0.1:6379/0"
        app.config["ECHOMQ_QUEUES"] = {"emails": {"concurrency": 10}}
        db.init_app(app)
        echomq.init_app(app)
        return app

    @echomq.processor("emails", "welcome")
    def welcome(job):                     # runs inside an app context of its own
        user = db.session.get(User, job.data["user_id"])

    # in a view: added after db.session commits, never if it rolls back
    echomq.enqueue_after_commit("emails", "welcome", {"user_id": user.id})

``app.config`` keys (each maps onto the YAML file's key of the same meaning and is
checked by the same validator): ``ECHOMQ_REDIS_URL``, ``ECHOMQ_PREFIX``,
``ECHOMQ_QUEUES``, ``ECHOMQ_DEFAULTS``, ``ECHOMQ_PLUGINS``, ``ECHOMQ_PLUGIN_PATHS``,
``ECHOMQ_ENTRY_POINTS``, ``ECHOMQ_LOGGING``, ``ECHOMQ_PROCESSES``,
``ECHOMQ_MAX_JOBS_PER_PROCESS``, ``ECHOMQ_MAX_MEMORY_PER_PROCESS``; or ``ECHOMQ_CONFIG``: the
YAML file to read instead. ``ECHOMQ_OUTBOX`` (``True`` or a mapping of outbox options) makes
:meth:`EchoMQ.enqueue_after_commit` write the job into the ``echomq_outbox`` table in the
session's transaction; the relay in the worker processes adds it once it commits.
``@echomq.processor(queue, name, atomic=True)`` runs a processor through the effect ledger
(``echomq_gevent.contrib.ledger``; ``ECHOMQ_LEDGER``: how its rows are kept). Commands: ``flask echomq worker``, ``flask echomq status`` and ``flask echomq outbox``.
See ``docs/frameworks.md``.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ..errors import ConfigError
from ..plugins.hookspecs import hookimpl
from .frameworks import Integration, Processors, enqueue_after_commit

__all__ = ["EchoMQ", "CONFIG_KEYS"]

#: app.config key -> the YAML key it stands for.
CONFIG_KEYS: Dict[str, str] = {
    "ECHOMQ_REDIS_URL": "redis",
    "ECHOMQ_PREFIX": "prefix",
    "ECHOMQ_QUEUES": "queues",
    "ECHOMQ_DEFAULTS": "defaults",
    "ECHOMQ_PLUGINS": "plugins",
    "ECHOMQ_PLUGIN_PATHS": "plugin_paths",
    "ECHOMQ_ENTRY_POINTS": "entry_points",
    "ECHOMQ_LOGGING": "logging",
    "ECHOMQ_PROCESSES": "processes",
    "ECHOMQ_MAX_JOBS_PER_PROCESS": "max_jobs_per_process",
    "ECHOMQ_MAX_MEMORY_PER_PROCESS": "max_memory_per_process",
}
_YAML_TO_KEY = {v: k for k, v in CONFIG_KEYS.items()}
#: app.config keys of the integration itself (not YAML keys)
OWN_KEYS = ("ECHOMQ_CONFIG", "ECHOMQ_OUTBOX", "ECHOMQ_LEDGER")
#: the environment variable a child of ``offload: process`` loads the app from (the
#: ``--app`` of ``flask echomq worker``, as ``FLASK_APP`` names it)
APP_ENV = "ECHOMQ_FLASK_APP"
EXTENSION = "echomq"


def _where(path: Tuple[Any, ...]) -> str:
    if not path:
        return "app.config['ECHOMQ_*']"
    head, rest = path[0], path[1:]
    if head == "redis":
        return "app.config['ECHOMQ_REDIS_URL']"
    key = _YAML_TO_KEY.get(head, f"ECHOMQ_{str(head).upper()}")
    return f"app.config[{key!r}]" + "".join(f"[{p!r}]" for p in rest)


def config_from_app(app: Any) -> Any:
    """The validated config from ``app.config``; raises ConfigError naming the key."""
    values: Dict[str, Any] = {}
    for key, yaml_key in CONFIG_KEYS.items():
        if key in app.config:
            values[yaml_key] = app.config[key]
    unknown = [k for k in app.config if k.startswith("ECHOMQ_") and k not in CONFIG_KEYS and k not in OWN_KEYS]
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], list(CONFIG_KEYS) + list(OWN_KEYS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; the keys are {', '.join(CONFIG_KEYS)}, " \
                                                           f"{', '.join(OWN_KEYS)}"
        raise ConfigError(f"app.config[{unknown[0]!r}] is not an echomq-gevent setting{hint}")
    return Integration.config_from(values, "app.config", _where, config_path=app.config.get("ECHOMQ_CONFIG"),
                                   config_setting="app.config['ECHOMQ_CONFIG']", base_dir=app.root_path)


class EchoMQ:
    """The extension. ``EchoMQ(app)`` or ``EchoMQ()`` then ``init_app(app)``.

    ``session``: a SQLAlchemy ``scoped_session`` the jobs use when the app does not use
    Flask-SQLAlchemy; it is removed after every job (Flask-SQLAlchemy's own session is
    removed by its app-context teardown) and is the default session of
    :meth:`enqueue_after_commit`.
    """

    def __init__(self, app: Any = None, session: Any = None) -> None:
        self.session = session
        self._app: Any = None
        #: ``@echomq.processor(queue, job_name="*", atomic=False)``: declare a processor
        #: (``atomic=True``: through the effect ledger, on the jobs' session)
        self.processor = Processors(f"echomq_gevent.contrib.flask.processors.{id(self):x}", atomic=self._atomic)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Any) -> None:
        """Check ``app.config`` (a wrong key raises ConfigError naming it), keep the
        configuration in ``app.extensions['echomq']`` and add the ``flask echomq`` commands."""
        cfg = config_from_app(app)
        self._app = app
        setting = (f"{app.config['ECHOMQ_CONFIG']}: queues" if app.config.get("ECHOMQ_CONFIG")
                   else "app.config['ECHOMQ_QUEUES']")
        state = Integration(cfg, setting, [FlaskJobContext(app, self), self.processor])
        state.outbox = self._outbox(app, state)
        if state.outbox is not None:
            from .outbox.registry import RelayPlugin

            state.plugins.append(RelayPlugin())
        state.plugins.append(self._ledger_pruner(app, state))
        app.extensions[EXTENSION] = state
        app.cli.add_command(_command_group(self))

    def _outbox(self, app: Any, state: Integration) -> Any:
        """The registered outbox of ``app.config['ECHOMQ_OUTBOX']`` (None when off)."""
        from .outbox import outbox_settings
        from .outbox.registry import Outbox, register, unregister

        key = f"flask:{app.import_name}:{id(self):x}"
        opts = outbox_settings(app.config.get("ECHOMQ_OUTBOX"),
                               lambda path: "app.config['ECHOMQ_OUTBOX']" + "".join(f"[{p!r}]" for p in path))
        if not opts.enabled:
            unregister(key)
            return None

        def make_db() -> Any:
            from .outbox.sqlalchemy import SqlAlchemyDb

            return SqlAlchemyDb(self._engine(app), f"the outbox of Flask app {app.import_name!r}")
        return register(Outbox(key, opts, make_db, state.queue, f"Flask app {app.import_name!r} outbox"))

    def _ledger_pruner(self, app: Any, state: Integration) -> Any:
        """The worker processes' pruning of the ledger table (``app.config['ECHOMQ_LEDGER']``),
        active once a processor is marked atomic."""
        from .ledger.pruner import LedgerPruner
        from .ledger.settings import ledger_settings

        state.ledger = ledger_settings(app.config.get("ECHOMQ_LEDGER"),
                                       lambda path: "app.config['ECHOMQ_LEDGER']" + "".join(f"[{p!r}]" for p in path))

        def make_db() -> Any:
            from .outbox.sqlalchemy import SqlAlchemyDb

            return SqlAlchemyDb(self._engine(app), f"the ledger of Flask app {app.import_name!r}")
        return LedgerPruner(make_db, state.ledger, f"Flask app {app.import_name!r}",
                            active=lambda: bool(self.processor.atomic_routes()))

    def _engine(self, app: Any) -> Any:
        """The engine of the jobs' session (the one given to the extension, else
        Flask-SQLAlchemy's)."""
        if self.session is not None:
            return self.session.get_bind()
        with app.app_context():
            return app.extensions["sqlalchemy"].engine

    def _atomic(self, fn: Any, value: Any) -> Any:
        """What ``@echomq.processor(..., atomic=True)`` registers: ``fn`` run once through
        the ledger, in the transaction of the session the jobs use."""
        if value is not True:
            raise TypeError(f"@echomq.processor(..., atomic=...) takes True (the jobs' session: EchoMQ(app, "
                            f"session=...) or Flask-SQLAlchemy's db.session), got {value!r}")
        from .ledger.sqlalchemy import SessionAtomicProcessor

        return SessionAtomicProcessor(fn, self._session, "EchoMQ(app, session=...) or Flask-SQLAlchemy's db.session",
                                      context=self._own_context)

    def _own_context(self) -> Any:
        """Where an atomic processor runs and is checked: nothing more on the job's greenlet
        (its app context is pushed), else an app context of its own (a native thread of
        ``offload: thread``; a child of ``offload: process``, which loads the app first),
        whose session is removed after."""
        from flask import has_app_context

        if has_app_context():
            return contextlib.nullcontext()
        return self._pushed(self._app if self._app is not None else self._load_app())

    @contextlib.contextmanager
    def _pushed(self, app: Any) -> Iterator[None]:
        with app.app_context():
            try:
                yield
            finally:
                if self.session is not None:
                    self.session.remove()

    def _load_app(self) -> Any:
        """The app, in a process that has not made it (a child of ``offload: process``):
        loaded as ``flask`` loads it, from ``ECHOMQ_FLASK_APP`` (which ``flask echomq
        worker`` sets for its children), else ``FLASK_APP``; ConfigError when neither
        finds an app that calls ``init_app`` on this extension."""
        import os

        from flask.cli import NoAppException, ScriptInfo

        path = os.environ.get(APP_ENV) or os.environ.get("FLASK_APP")
        if not path:
            raise ConfigError(f"a processor marked atomic runs in a process without the Flask app (a child of "
                              f"offload: process, or a worker not started by flask echomq worker), and neither "
                              f"{APP_ENV} nor FLASK_APP names it: run the worker with flask echomq worker, or set "
                              f"{APP_ENV}=module:create_app in its environment")
        try:
            ScriptInfo(app_import_path=path).load_app()
        except NoAppException as exc:
            raise ConfigError(f"{APP_ENV} / FLASK_APP {path!r}: no Flask app there ({exc})") from None
        if self._app is None:
            raise ConfigError(f"{APP_ENV} / FLASK_APP {path!r} loads an app that does not call init_app on the "
                              f"EchoMQ extension of the processors marked atomic")
        return self._app

    # -- per app --------------------------------------------------------------------------
    def state(self, app: Any = None) -> Integration:
        if app is None:
            from flask import current_app

            app = current_app._get_current_object()
        try:
            return app.extensions[EXTENSION]
        except KeyError:
            raise RuntimeError("EchoMQ.init_app(app) has not been called for this app") from None

    def queue(self, name: str, app: Any = None) -> Any:
        """The shared :class:`~echomq_gevent.queue.Queue` of a declared queue."""
        return self.state(app).queue(name)

    def enqueue(self, queue: str, name: str, data: Any = None, opts: Optional[Mapping[str, Any]] = None) -> Any:
        """Add a job now; returns the Job."""
        return self.state().enqueue(queue, name, data, opts)

    def enqueue_after_commit(self, queue: str, name: str, data: Any = None,
                             opts: Optional[Mapping[str, Any]] = None, session: Any = None) -> Optional[str]:
        """Add a job after the next commit of ``session`` (default: the ``session`` given to
        the extension, else Flask-SQLAlchemy's ``db.session``); a rollback drops it. The
        queue, options and data are checked now.

        With ``ECHOMQ_OUTBOX`` on, the job is written into ``echomq_outbox`` in the
        session's transaction instead (a rolled-back ``begin_nested()`` drops only its
        own rows) and the relay adds it once the transaction commits; returns the job id
        it will have. Off, returns None."""
        state = self.state()
        session = session if session is not None else self._session()
        box = getattr(state, "outbox", None)
        if box is None:
            enqueue_after_commit(session, state.deferred(queue, name, data, opts))
            return None
        from .outbox.rows import encode_row
        from .outbox.sqlalchemy import write_row

        params = encode_row(queue, name, state.checked(queue, name, data, opts), opts)
        write_row(session, params, notify=box.settings.notifies)
        enqueue_after_commit(session, box.wake)
        return params[4]

    def _session(self) -> Any:
        """The session the app's jobs and ``enqueue_after_commit`` use: the one given to
        the extension, else Flask-SQLAlchemy's ``db.session``; RuntimeError when neither."""
        if self.session is not None:
            return self.session
        from flask import current_app

        db = current_app.extensions.get("sqlalchemy")
        if db is None:
            raise RuntimeError("enqueue_after_commit: pass session=..., give EchoMQ(app, session=...) or use "
                               "Flask-SQLAlchemy")
        return db.session


class FlaskJobContext:
    """Plugin: each job runs in an app context of its own; a plain SQLAlchemy
    ``scoped_session`` given to the extension is removed after the job."""

    def __init__(self, app: Any, ext: EchoMQ) -> None:
        self.__name__ = f"echomq_gevent.contrib.flask.context.{app.import_name}.{id(self):x}"
        self.app = app
        self.ext = ext

    @hookimpl
    def echomq_job_context(self, worker: Any, job: Any) -> Any:
        return self._scope()

    @contextlib.contextmanager
    def _scope(self) -> Iterator[None]:
        with self.app.app_context():
            try:
                yield
            finally:
                if self.ext.session is not None:
                    self.ext.session.remove()


def _processes_option(ctx: Any, param: Any, value: Optional[str]) -> Optional[int]:
    import click

    from ..host.config import parse_processes

    if value is None:
        return None
    try:
        return parse_processes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _child_argv(index: int) -> List[str]:
    """A supervised child: ``python -m flask ...`` with this command's arguments, patched
    for gevent before the app loads."""
    from ..host.cli import child_command_line

    return [sys.executable, "-m", "echomq_gevent.contrib.patched", "-m", "flask",
            *child_command_line(sys.argv[1:], index)]


def _name_the_app(app: Any) -> None:
    """Tell the children of ``offload: process`` where the app comes from
    (:data:`APP_ENV`: the command's ``--app``, else the app's module), unless it is set."""
    import os

    import click
    from flask.cli import ScriptInfo

    ctx = click.get_current_context(silent=True)
    info = ctx.find_object(ScriptInfo) if ctx is not None else None
    os.environ.setdefault(APP_ENV, (info.app_import_path if info is not None else None) or app.import_name)


def _command_group(ext: EchoMQ) -> Any:
    import click
    from flask import current_app
    from flask.cli import AppGroup

    group = AppGroup("echomq", help="echomq-gevent job workers of this app.")

    @group.command("worker")
    @click.option("--queue", "-Q", "queues", multiple=True, help="run only this queue (repeat for more)")
    @click.option("--check", is_flag=True, help="validate the settings, import the processors, ping Redis")
    @click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error", "critical"]))
    @click.option("--processes", callback=_processes_option, metavar="N",
                  help="run N supervised worker processes (auto: the CPU count); overrides ECHOMQ_PROCESSES")
    @click.option("--supervised-child", type=int, hidden=True)
    def worker(queues: Tuple[str, ...], check: bool, log_level: Optional[str], processes: Optional[int],
               supervised_child: Optional[int]) -> None:
        """Run the job workers in this process; SIGTERM/SIGINT drains them."""
        from gevent import monkey

        if not monkey.is_module_patched("socket"):
            # The app (its engine, pool locks) was made before gevent patched anything:
            # start again with the process patched first.
            click.echo("echomq worker: restarting with gevent patched before the app loads", err=True)
            from .patched import restart_patched

            restart_patched(sys.argv[1:], module="flask")
        app = current_app._get_current_object()
        state = ext.state(app)
        _name_the_app(app)
        try:
            code = state.run_worker(list(queues), check=check, log_level=log_level, processes=processes,
                                    supervised_child=supervised_child, child_argv=_child_argv)
        except ConfigError as exc:
            click.echo(f"echomq: configuration error: {exc}", err=True)
            sys.exit(2)
        sys.exit(code)

    @group.command("outbox")
    @click.argument("action", type=click.Choice(["list", "retry", "delete"]))
    @click.argument("ids", nargs=-1)
    @click.option("--all", "all_rows", is_flag=True, help="retry: every parked row")
    @click.option("--json", "as_json", is_flag=True, help="list: print JSON")
    def outbox(action: str, ids: Tuple[str, ...], all_rows: bool, as_json: bool) -> None:
        """The outbox: list its numbers and parked rows, retry or delete parked rows."""
        from .outbox.commands import parse_ids, run_outbox_command

        state = ext.state(current_app._get_current_object())
        try:
            numbers = parse_ids(ids)
        except ValueError as exc:
            click.echo(f"echomq: {exc}", err=True)
            sys.exit(2)
        sys.exit(run_outbox_command(getattr(state, "outbox", None), action, numbers, all_rows, as_json))

    @group.command("status")
    @click.argument("queues", nargs=-1)
    @click.option("--json", "as_json", is_flag=True, help="print JSON")
    def status(queues: Tuple[str, ...], as_json: bool) -> None:
        """Job counts per queue and the workers seen."""
        state = ext.state(current_app._get_current_object())
        try:
            state.print_status(list(queues), as_json=as_json)
        except ConfigError as exc:
            click.echo(f"echomq: configuration error: {exc}", err=True)
            sys.exit(2)

    return group

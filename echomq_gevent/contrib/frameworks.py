"""What the Django, Flask and Pyramid integrations share.

* **settings to config**: each framework keeps its own settings (Django's
  ``settings.ECHOMQ``, Flask's ``app.config['ECHOMQ_*']``, Pyramid's ``echomq.*`` lines of
  the ``.ini``); they are turned into the keys of the YAML file and checked by the same
  validator (:func:`echomq_gevent.host.config.config_from_mapping`), so a worker option is
  refused by the one option table and the error names the setting the user wrote. A
  setting may instead point at the YAML file (``config``), which then stays the source.
* :class:`Integration`: the validated config, the shared per-process queues
  (``queue(name)`` refuses a queue the settings do not declare), running the workers
  through the command's own runner (:func:`echomq_gevent.host.cli.run_config`) and the status
  table.
* :class:`Processors`: processors declared with a decorator in the app's modules,
  registered with the plugin host (``echomq_register_processors``).
* :func:`enqueue_after_commit`: a job that goes out only after a SQLAlchemy session's
  next commit (Flask and Pyramid apps without ``pyramid_tm``).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..plugins.hookspecs import hookimpl

if TYPE_CHECKING:  # pragma: no cover
    from ..host.config import Config

# Nothing here imports redis (through the config) at import time: the Pyramid runner
# (``python -m echomq_gevent.contrib.pyramid``) imports this before it patches gevent.

log = logging.getLogger("echomq_gevent.contrib")

__all__ = ["Integration", "Processors", "enqueue_after_commit", "typed_ini_value", "EXIT_CONFIG"]

Path = Tuple[Any, ...]

#: Exit code of a configuration error (as ``echomq-gevent``'s).
EXIT_CONFIG = 2


def typed_ini_value(text: str) -> Any:
    """An ``.ini`` value typed the way a plain YAML scalar is (``5`` -> 5, ``true`` ->
    True, ``null`` -> None); anything else stays the string."""
    import yaml

    text = text.strip()
    if not text:
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (int, float, bool, str)) or value is None else text


class Processors:
    """Processors declared where the app keeps its code::

        from echomq_gevent.contrib.django import processor

        @processor("emails", "welcome")          # queue, job name ("*": every name)
        def send_welcome(job):
            ...

    The table is a plugin: the integration registers it with the worker's plugin host,
    whose ``echomq_register_processors`` adds every route. Declaring a processor does not
    import anything; the worker imports the modules that declare them before it starts.
    """

    def __init__(self, name: str, atomic: Optional[Callable[[Callable[..., Any], Any], Any]] = None) -> None:
        self.__name__ = name  # the name pluggy lists the plugin under
        self._routes: List[Tuple[str, str, Callable[..., Any]]] = []
        #: the framework's ledger: ``atomic(fn, value)`` -> the processor that runs ``fn``
        #: through it (None: this framework has no ledger yet)
        self._atomic = atomic

    def __call__(self, queue: str, job_name: str = "*",
                 atomic: Any = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """``atomic=True`` (or a database name where the framework has several): the
        processor's database effects and its job's ledger row commit in one
        transaction, and a delivery of the job again answers the stored return value
        without calling it (:mod:`echomq_gevent.contrib.ledger`). The decorator then
        returns the wrapped processor, under the function's own name."""
        if not isinstance(queue, str) or not queue:
            raise TypeError(f"processor(queue, job_name): queue must be a queue name, got {queue!r}")
        if atomic is not False and self._atomic is None:
            raise TypeError(f"@processor({queue!r}, {job_name!r}, atomic=...): this integration has no effect "
                            f"ledger")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(fn):
                raise TypeError(f"@processor({queue!r}, {job_name!r}) decorates {fn!r}, which is not callable")
            if atomic is not False:
                fn = self._atomic(fn, atomic)  # type: ignore[misc]
            route = (queue, job_name, fn)
            if route not in self._routes:
                self._routes.append(route)
            return fn
        return register

    def routes(self) -> List[Tuple[str, str, Callable[..., Any]]]:
        return list(self._routes)

    def check_queues(self, cfg: Config, queues_setting: str) -> None:
        """Refuse a processor declared for a queue the settings do not declare."""
        for queue, _job_name, fn in self._routes:
            if queue not in cfg.queues:
                where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
                raise ConfigError(
                    f"{queues_setting}: the processor {where} is declared for queue {queue!r}, which is "
                    f"not one of the declared queues ({', '.join(cfg.queues)}); add it there")

    def atomic_routes(self) -> List[Tuple[str, str, Callable[..., Any]]]:
        """The routes whose processor runs through the ledger."""
        return [r for r in self._routes if getattr(r[2], "echomq_ledgered", False)]

    def check_ledgers(self, queues: Sequence[str], bind: Optional[Callable[[Any], None]] = None) -> None:
        """Refuse at start a processor of ``queues`` marked atomic whose database is not
        configured (ConfigError naming the processor and the setting). ``bind`` (the
        integration's ``bind_atomic``) is first given every atomic processor, those
        declared after the integration was built too."""
        for queue, _job_name, fn in self.atomic_routes():
            if bind is not None:
                bind(fn)
            if queue in queues:
                fn.check()

    @hookimpl
    def echomq_register_processors(self, registry: Any) -> None:
        for queue, job_name, fn in self._routes:
            registry.add(queue, job_name, fn)


class Integration:
    """One app's validated configuration and its shared queues.

    ``cfg`` is the validated :class:`~echomq_gevent.host.config.Config`; ``queues_setting``
    names the setting that declares the queues (used in errors); ``plugins`` are the
    framework's own plugins (per-job context, the processor table) given to the workers.
    """

    def __init__(self, cfg: Config, queues_setting: str, plugins: Sequence[Any] = ()) -> None:
        self.cfg = cfg
        self.queues_setting = queues_setting
        self.plugins = list(plugins)
        self._embedded: Any = None
        #: the app's :class:`~echomq_gevent.contrib.outbox.registry.Outbox` (None: off)
        self.outbox: Any = None
        #: the app's ledger settings (:class:`~echomq_gevent.contrib.ledger.LedgerSettings`)
        self.ledger: Any = None
        #: given each processor marked atomic before the start checks (Pyramid: binds the
        #: app's registry to those declared after the integration was built), or None
        self.bind_atomic: Optional[Callable[[Any], None]] = None

    # -- building ------------------------------------------------------------------------
    @staticmethod
    def config_from(values: Mapping[str, Any], source: str, where: Callable[[Path], str],
                    config_path: Optional[str] = None, config_setting: str = "config",
                    base_dir: Optional[str] = None) -> Config:
        """The validated config from framework settings: the YAML file at
        ``config_path`` when one is named (no other key may be set then), else ``values``
        (the YAML's keys). Raises ConfigError naming the setting."""
        from ..host.config import TOP_LEVEL_KEYS, config_from_mapping, load_config

        if config_path is not None:
            if not isinstance(config_path, str) or not config_path:
                raise ConfigError(f"{config_setting}: must be the path of the YAML file, got {config_path!r}")
            extra = [k for k in values if k in TOP_LEVEL_KEYS]
            if extra:
                raise ConfigError(
                    f"{config_setting} names the YAML file {config_path!r}, and {where((extra[0],))} is set "
                    f"too; keep the settings in one place (the file, or the settings without "
                    f"{config_setting})")
            return load_config(config_path)
        if "queues" not in values:
            raise ConfigError(f"{where(('queues',))} is not set: declare the queues the app uses, "
                              f"e.g. {{'emails': {{'concurrency': 10}}}} (or name a YAML file in "
                              f"{config_setting})")
        return config_from_mapping(dict(values), source, where=where, base_dir=base_dir)

    # -- enqueueing ----------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        """The Redis URL of the config (for ``embedded``: the private server, started here
        when no process runs it yet)."""
        if not self.cfg.redis.embedded:
            return self.cfg.redis.url
        if self._embedded is None:
            from ..host.embedded import EmbeddedRedis

            r = self.cfg.redis
            self._embedded = EmbeddedRedis(directory=r.embedded_dir, port=r.embedded_port,
                                           persist=r.embedded_persist).start()
        return self._embedded.url

    def check_queue(self, name: str) -> None:
        if name not in self.cfg.queues:
            raise ConfigError(f"{self.queues_setting}: queue {name!r} is not declared (declared: "
                              f"{', '.join(self.cfg.queues)}); add it there or fix the name")

    def queue(self, name: str) -> Any:
        """The process's shared :class:`~echomq_gevent.queue.Queue` for ``name`` (one per
        process, safe across forks; a bounded connection pool shared by the greenlets)."""
        self.check_queue(name)
        from .wsgi import get_queue

        return get_queue(name, connection=self.redis_url, prefix=self.cfg.prefix)

    def enqueue(self, queue: str, name: str, data: Any = None, opts: Optional[Mapping[str, Any]] = None) -> Any:
        """Add a job now; returns the :class:`~echomq_gevent.queue.job.Job`."""
        return self.queue(queue).add(name, data if data is not None else {}, dict(opts) if opts else None)

    def checked(self, queue: str, name: str, data: Any = None, opts: Optional[Mapping[str, Any]] = None) -> str:
        """Check the queue name, the job options and the data now (where the job is
        asked for); returns the data as JSON. Raises ConfigError / InvalidOptionError /
        InvalidJobDataError naming what is wrong."""
        self.check_queue(queue)
        from ..protocol.options import encode_job_data, validate_job_options

        if not isinstance(name, str):
            from ..errors import InvalidOptionError

            raise InvalidOptionError(f"job name must be a string, got {name!r}")
        clean = validate_job_options(opts, name)
        if "repeat" in clean:
            from ..errors import InvalidOptionError

            raise InvalidOptionError(f"job option 'repeat' (job {name!r}): BullMQ 6 does not repeat jobs added "
                                     f"with opts.repeat; declare a job scheduler instead")
        return encode_job_data(data if data is not None else {}, name, clean.get("sizeLimit"))

    def deferred(self, queue: str, name: str, data: Any = None,
                 opts: Optional[Mapping[str, Any]] = None) -> Callable[[], Any]:
        """A call that adds the job later (after a commit); the queue name and the job
        options are checked now, so a mistake shows where the job was asked for."""
        self.checked(queue, name, data, opts)

        def send() -> Any:
            try:
                return self.enqueue(queue, name, data, opts)
            except Exception:
                log.exception("the transaction committed, but the job %r for queue %r could not be added",
                              name, queue)
                raise
        return send

    # -- running ---------------------------------------------------------------------------
    def select(self, names: Sequence[str]) -> Config:
        """The config with only the queues ``names`` (all when empty): a pool keeps those
        of its queues, and serves no queue its patterns find (none was named)."""
        if not names:
            return self.cfg
        for n in names:
            self.check_queue(n)
        pools = {name: dataclasses.replace(pool, patterns=[]) for name, pool in self.cfg.pools.items()}
        return dataclasses.replace(self.cfg, queues={n: self.cfg.queues[n] for n in names}, pools=pools)

    def run_worker(self, queues: Sequence[str] = (), check: bool = False,
                   log_level: Optional[str] = None, progress: bool = False,
                   plugins: Optional[Sequence[Any]] = None, processes: Optional[int] = None,
                   supervised_child: Optional[int] = None,
                   child_argv: Optional[Callable[[int], List[str]]] = None) -> int:
        """Run the workers of the (selected) queues in this process until SIGTERM/SIGINT
        drains them; returns the exit code. Uses the command's runner, so signals,
        draining and hand-back behave as ``echomq-gevent -c FILE``. ``plugins`` default
        to the integration's own.

        With more than one process (``processes``, the command's ``--processes``, else the
        settings' ``processes``) or a recycling limit, this process becomes the supervisor
        (:func:`echomq_gevent.host.cli.supervise`) and runs ``child_argv(index)`` (the
        command's own command line, with ``--supervised-child INDEX``) in each child;
        ``supervised_child`` is that index in a child."""
        from ..host import cli  # patches the process for gevent if it is not yet

        if supervised_child is None and not check and child_argv is not None \
                and cli.wants_supervisor(self.select(queues), processes):
            cfg = self.select(queues)
            return cli.supervise(cfg, processes, processes_override=processes, log_level=log_level,
                                 child_argv=child_argv)
        cfg, plugins = self.prepare(queues, plugins)
        supervised = None
        if supervised_child is not None:
            from ..host.supervised import SupervisedChild

            supervised = SupervisedChild.from_env(supervised_child, cfg)
        return cli.run_config(cfg, plugins, check=check, log_level=log_level, progress=progress,
                              supervised=supervised)

    def prepare(self, queues: Sequence[str] = (), plugins: Optional[Sequence[Any]] = None) -> Tuple[
            Config, List[Any]]:
        """Check what a worker would run before anything starts: the selected queues, the
        declared processors' queues, the plugins and every queue's processor (imported).
        Returns the config and the plugins; raises ConfigError naming the setting."""
        from ..host.runner import build_plugin_host

        cfg = self.select(queues)
        plugins = list(self.plugins if plugins is None else plugins)
        for plugin in plugins:
            if isinstance(plugin, Processors):
                plugin.check_queues(self.cfg, self.queues_setting)
                plugin.check_ledgers(list(cfg.queues), self.bind_atomic)
        build_plugin_host(cfg, tuple(plugins))
        return cfg, plugins

    def drain(self, *queues: str, timeout: float = 10.0, delayed: str = "run", raise_errors: bool = False,
              outbox: bool = True) -> Any:
        """For tests: run the jobs of the named queues (every declared queue when none is
        named) with real workers in this process, with the app's processors and per-job
        context, until none is left to run; returns the
        :class:`~echomq_gevent.testing.DrainResult`. With ``outbox``, the registered
        outboxes' waiting rows are relayed first, through the calling greenlet's
        database connection (see :func:`echomq_gevent.testing.drain`)."""
        from ..host.testkit.drain import drain as run
        from .outbox.registry import relay_waiting

        names = list(queues) or list(self.cfg.queues)
        return run([self.queue(n) for n in names], config=self.select(names), plugins=self.plugins, timeout=timeout,
                   delayed=delayed, raise_errors=raise_errors, before_poll=relay_waiting() if outbox else None)

    def print_status(self, queues: Sequence[str] = (), as_json: bool = False, out: Any = None) -> int:
        from ..host.pools import describe_pools
        from ..host.process_state import read_states
        from ..host.status import print_status

        cfg = self.select(queues)
        code = print_status(self.redis_url, list(cfg.queues), cfg.prefix, as_json=as_json, out=out,
                            supervisors=read_states(self.cfg.filename),
                            pools=describe_pools(self.cfg, list(cfg.queues)))
        if self.outbox is not None and not as_json:
            import sys

            s = self.outbox.read()
            line = (f"outbox: cannot be read: {s['error']}" if s.get("error") else
                    f"outbox: {s['waiting']} row(s) waiting (oldest {s['oldest_age_s']:.1f} s), {s['parked']} "
                    f"parked" + (" (list them with the outbox command)" if s["parked"] else ""))
            print(line, file=out or sys.stdout)
        return code


# --- SQLAlchemy sessions ----------------------------------------------------------------------
_PENDING = "echomq_gevent.pending_jobs"


def enqueue_after_commit(session: Any, send: Callable[[], Any]) -> None:
    """Call ``send`` (which adds a job) after ``session``'s next commit; a rollback or a
    close without commit drops it.

    ``session`` is a SQLAlchemy ``Session`` or a ``scoped_session`` (Flask-SQLAlchemy's
    ``db.session``). Jobs wait in ``session.info`` and go out in the order asked, after
    the outermost transaction commits; a job that cannot be added is logged and the
    error raised from ``commit()`` (the rows are committed by then).
    """
    from sqlalchemy import event

    # a scoped_session (Flask-SQLAlchemy's db.session): the session of the current scope
    real = session.registry() if hasattr(session, "registry") else session
    pending = real.info.setdefault(_PENDING, [])
    pending.append(send)
    if not event.contains(real, "after_commit", _after_commit):
        event.listen(real, "after_commit", _after_commit)
        event.listen(real, "after_transaction_end", _after_transaction_end)


def _after_commit(session: Any) -> None:
    pending = session.info.pop(_PENDING, None) or []
    first: Optional[BaseException] = None
    for send in pending:
        try:
            send()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


def _after_transaction_end(session: Any, transaction: Any) -> None:
    if transaction.parent is None:
        dropped = session.info.pop(_PENDING, None)
        if dropped:
            log.info("%d job(s) asked for in a transaction that did not commit were not added", len(dropped))

"""The YAML configuration file: loading, ``${VAR}`` expansion and validation.

``echomq-gevent -c FILE`` (and the gunicorn integration) call :func:`load_config`
on the main greenlet before anything starts. A file that cannot work is refused
with a :class:`~echomq_gevent.errors.ConfigError` whose message names the file, the
line and the dotted key (``queues.mail.concurency``), and for a typo the nearest
valid key. Queue options are checked against the one options table,
:data:`echomq_gevent.worker.options.WORKER_OPTIONS`, so the file, ``Worker(...)`` and
``docs/configuration.md`` never drift apart.

The file::

    redis:
      url: embedded            # or redis://host:port/db, rediss://..., unix:///path.sock,
                               # redis+sentinel://host:port,host:port/service_name/db,
                               # redis+cluster://host:port,host:port/
      # sentinel: {sentinels: [host:port, ...], service: mymaster, db: 0}  (instead of url)
      # cluster: [host:port, host:port]  (instead of url; the prefix needs a hash tag)
      embedded: {dir: var}     # only with url: embedded
      socket_timeout: 10       # and the other ConnectionSettings (connection.py)
    prefix: bull
    plugin_paths: [../plugins] # folders (relative to this file) put on sys.path
    plugins: [demo]            # plugin modules (or module:object)
    entry_points: true         # also load the `echomq_gevent` entry-point plugins
    logging: {level: info, format: text}
    defaults: {concurrency: 10}
    processes: 1               # or auto (the CPU count): a supervisor runs that many children
    max_jobs_per_process: 1000 # recycle a child after this many jobs (null: never)
    max_memory_per_process: 512  # ... or once its RSS passes this many MB (null: never)
    gc_freeze: true            # gc.freeze() what the process loaded, once its workers started
    marker_wait: per_queue     # or shared: one BZPOPMIN for the idle queues of a process
    queues:
      demo: {processor: "demo:process", concurrency: 20}
    pools:                     # queues served from one budget (host/pools.py)
      default: {concurrency: 50, queues: [demo], order: weighted, weights: {demo: 1}}

Any scalar may use ``${VAR}`` (error when unset) or ``${VAR:-default}`` (default when
unset or empty); an unquoted scalar is typed after expansion, so
``concurrency: ${CONC:-5}`` is the integer 5.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

import yaml

from .redis_section import (DEFAULT_REDIS_URL, EMBEDDED, EMBEDDED_KEYS, REDIS_KEYS, SENTINEL_KEYS,
                           RedisSettings, parse_redis)
from .located import Builder, Marks, Path, format_error, suggest
from .pools import has_patterns, parse_pools
from ..connection.urls import CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, redact_url
from ..errors import ConfigError
from ..protocol.keys import DEFAULT_PREFIX, ClusterHashTagError, require_hash_tag, validate_prefix, validate_queue_name
from ..worker.options import WORKER_OPTIONS, OptionError, check_worker_option, validate_worker_options

__all__ = [
    "Config", "QueueConfig", "RedisSettings", "load_config", "parse_config", "config_from_mapping",
    "TOP_LEVEL_KEYS", "QUEUE_ONLY_KEYS", "PROCESS_KEYS", "parse_processes", "cpu_count",
    "EMBEDDED", "DEFAULT_REDIS_URL", "redact_url", "SCHEDULER_KEYS",
    # the redis: section's keys live in config_redis; named here too for callers of this module
    "REDIS_KEYS", "SENTINEL_KEYS", "EMBEDDED_KEYS",
]


#: Top-level keys and what each holds (the reference in docs/configuration.md lists them).
TOP_LEVEL_KEYS = ("redis", "prefix", "plugin_paths", "plugins", "entry_points", "logging",
                  "defaults", "processes", "max_jobs_per_process", "max_memory_per_process", "gc_freeze",
                  "marker_wait", "queues", "pools")
#: The process keys: how many worker processes the command supervises, and when one is recycled.
PROCESS_KEYS = ("processes", "max_jobs_per_process", "max_memory_per_process")
LOGGING_KEYS = ("level", "format")
#: The values of ``marker_wait``.
MARKER_WAITS = ("per_queue", "shared")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")
#: Keys a queue takes besides the worker options.
QUEUE_ONLY_KEYS = ("processor", "schedulers")
#: Keys of one entry under ``queues.<name>.schedulers``.
SCHEDULER_KEYS = ("repeat", "template")


# --- the validated configuration -----------------------------------------------------------


@dataclass
class QueueConfig:
    """One queue of the file: its worker options (complete, defaults filled in) and the
    optional ``processor: "module:function"`` spec."""

    name: str
    options: Dict[str, Any]
    processor: Optional[str] = None
    line: Optional[int] = None
    #: ``schedulers:`` of the queue: id -> {"repeat": RepeatOptions, "template": {...}}
    schedulers: Dict[str, Dict[str, Any]] = field(default_factory=dict)


@dataclass
class Config:
    """A validated configuration file. Built by :func:`load_config`/:func:`parse_config`."""

    filename: str
    redis: RedisSettings = field(default_factory=RedisSettings)
    prefix: str = DEFAULT_PREFIX
    plugin_paths: List[str] = field(default_factory=list)
    plugins: List[str] = field(default_factory=list)
    entry_points: bool = True
    log_level: str = "info"
    log_format: str = "text"
    defaults: Dict[str, Any] = field(default_factory=dict)
    #: worker processes the command runs (``processes:``; ``auto`` is resolved to the CPU count)
    processes: int = 1
    #: a worker process is recycled after this many finished jobs (None: never)
    max_jobs_per_process: Optional[int] = None
    #: ... or once its resident memory passes this many MB (None: never)
    max_memory_per_process: Optional[int] = None
    #: the worker process freezes what it loaded at start (``gc.collect(); gc.freeze()``)
    gc_freeze: bool = True
    #: how idle workers wait for jobs: ``per_queue`` (a blocking connection each) or
    #: ``shared`` (one ``BZPOPMIN`` over the queues of the process; not on a cluster)
    marker_wait: str = "per_queue"
    queues: Dict[str, QueueConfig] = field(default_factory=dict)
    #: ``pools:``: several queues served from one concurrency budget (:mod:`.pools`)
    pools: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict)
    marks: Marks = field(default_factory=Marks, repr=False)
    #: for a configuration not read from a file: names the setting at a key path
    where: Optional[Callable[[Path], str]] = field(default=None, repr=False)

    def error(self, path: Path, message: str) -> ConfigError:
        """A ConfigError naming this file, the line of ``path`` and the key (or, for a
        configuration made from framework settings, the setting)."""
        if self.where is not None:
            return ConfigError(f"{self.where(tuple(path))}: {message}")
        return ConfigError(format_error(self.filename, self.marks.line(path), path, message))

    @property
    def supervised(self) -> bool:
        """True when the command runs a supervisor: more than one process, or a
        recycling limit (recycling needs a parent to start the replacement)."""
        return (self.processes > 1 or self.max_jobs_per_process is not None
                or self.max_memory_per_process is not None)

    def activate_paths(self) -> None:
        """Put ``plugin_paths`` (and the working directory) at the front of ``sys.path``
        so plugin and processor modules import. Called by the CLI before plugins load."""
        for p in reversed([os.getcwd()] + self.plugin_paths):
            if p not in sys.path:
                sys.path.insert(0, p)


def load_config(path: str, env: Optional[Mapping[str, str]] = None) -> Config:
    """Read and validate the file at ``path``. ``env`` defaults to ``os.environ``.

    Raises ConfigError (file, line, key) for anything wrong, including a missing file.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror or exc}") from None
    return parse_config(text, filename=path, env=env)


def parse_config(text: str, filename: str = "<config>", env: Optional[Mapping[str, str]] = None) -> Config:
    """Validate YAML ``text`` (named ``filename`` in errors); see the module doc for the keys."""
    env = os.environ if env is None else env
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        where = f"{filename}, line {line}" if line else filename
        raise ConfigError(f"{where}: this is not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename}: this is not valid YAML: {exc}") from None
    builder = Builder(filename, env)
    data = builder.build(node, ()) if node is not None else {}
    cfg = Config(filename=filename, raw=data, marks=builder.marks)
    base_dir = os.path.dirname(os.path.abspath(filename)) if filename and not filename.startswith("<") \
        else os.getcwd()
    return _validate(cfg, data, base_dir)


def config_from_mapping(data: Any, source: str, where: Optional[Callable[[Path], str]] = None,
                        base_dir: Optional[str] = None) -> Config:
    """Validate a configuration given as plain Python values, with the same keys and
    rules as the YAML file (the framework integrations build it from Django settings,
    Flask's ``app.config`` or Pyramid's ``.ini`` settings).

    ``source`` names where the values came from; ``where(path)`` turns a key path such
    as ``("queues", "mail", "concurrency")`` into the name of the setting the user wrote
    (``settings.ECHOMQ['queues']['mail']['concurrency']``), so every error names it.
    ``plugin_paths`` are relative to ``base_dir`` (default: the working directory).
    Raises ConfigError.
    """
    cfg = Config(filename=source, raw=data if isinstance(data, dict) else {}, where=where)
    return _validate(cfg, data, base_dir or os.getcwd())


def _validate(cfg: Config, data: Any, base_dir: str) -> Config:
    if not isinstance(data, dict):
        raise cfg.error((), f"the configuration must be a mapping with keys {', '.join(TOP_LEVEL_KEYS)}, "
                            f"got {type(data).__name__}")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise cfg.error((key,), suggest(key, TOP_LEVEL_KEYS))
    cfg.redis = parse_redis(data.get("redis"), cfg.error, cfg.marks)
    if "prefix" in data:
        prefix = data["prefix"]
        try:
            cfg.prefix = validate_prefix(prefix)
        except ValueError as exc:
            raise cfg.error(("prefix",), str(exc)) from None
    cfg.plugin_paths = [os.path.normpath(os.path.join(base_dir, p))
                        for p in _str_list(cfg, data, "plugin_paths")]
    cfg.plugins = _str_list(cfg, data, "plugins")
    for i, spec in enumerate(cfg.plugins):
        if not re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?", spec):
            raise cfg.error(("plugins", i), f"{spec!r} is not a module name (or module:object)")
    if "entry_points" in data:
        if not isinstance(data["entry_points"], bool):
            raise cfg.error(("entry_points",), f"must be true or false, got {data['entry_points']!r}")
        cfg.entry_points = data["entry_points"]
    if "gc_freeze" in data:
        if not isinstance(data["gc_freeze"], bool):
            raise cfg.error(("gc_freeze",), f"must be true or false, got {data['gc_freeze']!r}")
        cfg.gc_freeze = data["gc_freeze"]
    if "marker_wait" in data:
        if data["marker_wait"] not in MARKER_WAITS:
            raise cfg.error(("marker_wait",), f"must be one of {', '.join(MARKER_WAITS)}, got {data['marker_wait']!r}")
        cfg.marker_wait = data["marker_wait"]
    _parse_logging(cfg, data.get("logging"))
    cfg.defaults = _parse_options(cfg, data.get("defaults"), ("defaults",), allow_processor=False)
    _parse_processes(cfg, data)
    _parse_queues(cfg, data)
    cfg.pools = parse_pools(cfg, data.get("pools"))
    _check_cluster_hash_tags(cfg)
    return cfg


def _check_cluster_hash_tags(cfg: Config) -> None:
    """On a Redis Cluster every queue's keys need a hash tag: refuse the file at load,
    at the queue's line, rather than when its worker starts."""
    if not cfg.redis.url.startswith((CLUSTER_SCHEME + "://", CLUSTER_TLS_SCHEME + "://")):
        return
    for name in cfg.queues:
        try:
            require_hash_tag(cfg.prefix, name)
        except ClusterHashTagError as exc:
            raise cfg.error(("queues", name), str(exc)) from None


def _str_list(cfg: Config, data: Mapping[str, Any], key: str) -> List[str]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise cfg.error((key,), f"must be a list of strings, got {value!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise cfg.error((key, i), f"must be a non-empty string, got {item!r}")
    return list(value)


def _parse_logging(cfg: Config, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise cfg.error(("logging",), f"must be a mapping with level and format, got {value!r}")
    for key, v in value.items():
        path = ("logging", key)
        if key not in LOGGING_KEYS:
            raise cfg.error(path, suggest(key, LOGGING_KEYS))
        allowed = LOG_LEVELS if key == "level" else LOG_FORMATS
        if not isinstance(v, str) or v.lower() not in allowed:
            raise cfg.error(path, f"must be one of {', '.join(allowed)}, got {v!r}")
        if key == "level":
            cfg.log_level = v.lower()
        else:
            cfg.log_format = v.lower()


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one),
    what ``processes: auto`` means."""
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_processes(value: Any) -> int:
    """``processes:`` or ``--processes``: a whole number of at least 1, or ``auto`` (the
    CPU count). Raises ValueError saying what is allowed."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return cpu_count()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a whole number of processes, at least 1, or auto (the CPU count), "
                         f"got {value!r}")
    return value


def _parse_processes(cfg: Config, data: Mapping[str, Any]) -> None:
    """The top-level process keys (:data:`PROCESS_KEYS`), each refused at its own line."""
    if data.get("processes") is not None:
        try:
            cfg.processes = parse_processes(data["processes"])
        except ValueError as exc:
            raise cfg.error(("processes",), str(exc)) from None
    jobs = data.get("max_jobs_per_process")
    if jobs is not None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise cfg.error(("max_jobs_per_process",),
                            f"must be a whole number of jobs, at least 1 (or null: never recycle), got {jobs!r}")
        cfg.max_jobs_per_process = jobs
    memory = data.get("max_memory_per_process")
    if memory is not None:
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
            raise cfg.error(("max_memory_per_process",),
                            f"must be a whole number of megabytes of resident memory, at least 1, e.g. 1024 "
                            f"for 1 GB (or null: never recycle), got {memory!r}")
        cfg.max_memory_per_process = memory


def _parse_options(cfg: Config, value: Any, path: Path, allow_processor: bool) -> Dict[str, Any]:
    """Check one mapping of worker options key by key (so the error has the key's line)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise cfg.error(path, f"must be a mapping of worker options, got {value!r}")
    valid = list(WORKER_OPTIONS) + (list(QUEUE_ONLY_KEYS) if allow_processor else [])
    out: Dict[str, Any] = {}
    for key, v in value.items():
        sub = path + (key,)
        if key == "processor" and allow_processor:
            if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", v):
                raise cfg.error(sub, f"must be 'module:function', got {v!r}")
            out[key] = v
            continue
        if key == "schedulers" and allow_processor:
            out[key] = _parse_schedulers(cfg, v, sub)
            continue
        if key in QUEUE_ONLY_KEYS:
            raise cfg.error(sub, f"{key} is per queue; set it under queues.<name>, not in defaults")
        if key not in WORKER_OPTIONS:
            raise cfg.error(sub, suggest(key, valid))
        try:
            check_worker_option(key, v)
        except OptionError as exc:
            raise cfg.error(sub, _strip_key(key, str(exc))) from None
        out[key] = v
    return out


def _parse_schedulers(cfg: Config, value: Any, path: Path) -> Dict[str, Dict[str, Any]]:
    """``queues.<name>.schedulers``: id -> {repeat, template}, checked as
    ``Queue.upsert_job_scheduler`` checks them (errors point at the key named)."""
    from ..errors import EchoMQError
    from ..queue.schedulers import validate_repeat, validate_template

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise cfg.error(path, f"must be a mapping from scheduler id to {{repeat, template}}, got {value!r}")
    out: Dict[str, Dict[str, Any]] = {}
    for scheduler_id, spec in value.items():
        sub = path + (scheduler_id,)
        if not isinstance(spec, dict):
            raise cfg.error(sub, f"must be a mapping with repeat (and template), got {spec!r}")
        for key in spec:
            if key not in SCHEDULER_KEYS:
                raise cfg.error(sub + (key,), suggest(key, SCHEDULER_KEYS))
        if "repeat" not in spec:
            raise cfg.error(sub, "needs repeat: {every: <ms>} or {pattern: '<cron>', tz: <zone>}")
        for key in SCHEDULER_KEYS:
            try:
                if key == "repeat":
                    validate_repeat(spec["repeat"])
                else:
                    validate_template(spec.get("template"), scheduler_id)
            except (EchoMQError, ValueError) as exc:
                raise cfg.error(_named_key(sub + (key,), spec.get(key), str(exc), key), str(exc)) from None
        out[scheduler_id] = {"repeat": spec["repeat"], "template": spec.get("template")}
    return out


def _named_key(path: Path, value: Any, message: str, prefix: str) -> Path:
    """The path of the (nested) key of ``value`` that ``message`` names, else ``path``."""
    if isinstance(value, dict):
        for name in value:
            if f"'{name}'" in message or f"{prefix}.{name}" in message:
                return path + (name,)
        for name, inner in value.items():
            if isinstance(inner, dict) and any(f"'{k}'" in message for k in inner):
                return _named_key(path + (name,), inner, message, name)
    return path


def _parse_queues(cfg: Config, data: Mapping[str, Any]) -> None:
    queues = data.get("queues")
    if queues is None and has_patterns(data.get("pools")):
        return  # the queues are those the pools' patterns find
    if queues is None:
        raise cfg.error(("queues",), "the file declares no queues; add queues: {name: {options}}")
    if not isinstance(queues, dict) or not queues:
        raise cfg.error(("queues",), f"must be a non-empty mapping from queue name to its options, "
                                     f"got {queues!r}")
    for name, value in queues.items():
        path = ("queues", name)
        try:
            validate_queue_name(name)
        except ValueError as exc:
            raise cfg.error(path, str(exc)) from None
        own = _parse_options(cfg, value if value is not None else {}, path, allow_processor=True)
        processor = own.pop("processor", None)
        schedulers = own.pop("schedulers", {})
        merged = dict(cfg.defaults)
        merged.update(own)
        try:
            options = validate_worker_options(merged, where=f"queue {name!r}")
        except OptionError as exc:
            key = exc.option
            at = path
            if key in own:
                at = path + (key,)
            elif key in cfg.defaults:
                at = ("defaults", key)
            raise cfg.error(at, str(exc).split(": ", 1)[-1]) from None
        cfg.queues[name] = QueueConfig(name=name, options=options, processor=processor,
                                       line=cfg.marks.line(path), schedulers=schedulers)


def _strip_key(key: str, message: str) -> str:
    """The validator's message without a leading ``<key> `` (the location names the key)."""
    return message[len(key) + 1:] if key and message.startswith(key + " ") else message

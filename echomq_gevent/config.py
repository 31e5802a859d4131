"""The YAML configuration file: loading, ``${VAR}`` expansion and validation.

``echomq-gevent -c FILE`` (and the gunicorn integration) call :func:`load_config`
on the main greenlet before anything starts. A file that cannot work is refused
with a :class:`~echomq_gevent.errors.ConfigError` whose message names the file, the
line and the dotted key (``queues.mail.concurency``), and for a typo the nearest
valid key. Queue options are checked against the one options table,
:data:`echomq_gevent.worker_options.WORKER_OPTIONS`, so the file, ``Worker(...)`` and
``docs/configuration.md`` never drift apart.

The file::

    redis:
      url: embedded            # or redis://host:port/db, rediss://..., unix:///path.sock,
                               # redis+sentinel://host:port,host:port/service_name/db
      # sentinel: {sentinels: [host:port, ...], service: mymaster, db: 0}  (instead of url)
      embedded: {dir: var}     # only with url: embedded
      socket_timeout: 10       # and the other ConnectionSettings (connection.py)
    prefix: bull
    plugin_paths: [../plugins] # folders (relative to this file) put on sys.path
    plugins: [demo]            # plugin modules (or module:object)
    entry_points: true         # also load the `echomq_gevent` entry-point plugins
    logging: {level: info, format: text}
    defaults: {concurrency: 10}
    queues:
      demo: {processor: "demo:process", concurrency: 20}

Any scalar may use ``${VAR}`` (error when unset) or ``${VAR:-default}`` (default when
unset or empty); an unquoted scalar is typed after expansion, so
``concurrency: ${CONC:-5}`` is the integer 5.
"""
from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import yaml

from .connection import (DEFAULT_SETTINGS, SETTING_KEYS, ConnectionSettingError, ConnectionSettings,
                         parse_sentinel_url, redact_url)
from .errors import ConfigError
from .keys import DEFAULT_PREFIX, validate_prefix, validate_queue_name
from .worker_options import WORKER_OPTIONS, OptionError, check_worker_option, validate_worker_options

__all__ = [
    "Config", "QueueConfig", "RedisSettings", "load_config", "parse_config", "config_from_mapping",
    "TOP_LEVEL_KEYS", "QUEUE_ONLY_KEYS",
    "EMBEDDED", "DEFAULT_REDIS_URL", "redact_url", "SCHEDULER_KEYS",
]

EMBEDDED = "embedded"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: Top-level keys and what each holds (the reference in docs/configuration.md lists them).
TOP_LEVEL_KEYS = ("redis", "prefix", "plugin_paths", "plugins", "entry_points", "logging",
                  "defaults", "queues")
REDIS_KEYS = ("url", "embedded", "sentinel") + SETTING_KEYS
SENTINEL_KEYS = ("sentinels", "service", "db", "username", "password", "sentinel_username",
                 "sentinel_password")
EMBEDDED_KEYS = ("dir", "port", "persist")
LOGGING_KEYS = ("level", "format")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")
#: Keys a queue takes besides the worker options.
QUEUE_ONLY_KEYS = ("processor", "schedulers")
#: Keys of one entry under ``queues.<name>.schedulers``.
SCHEDULER_KEYS = ("repeat", "template")

Path = Tuple[Any, ...]


# --- located YAML -----------------------------------------------------------------------
class _Marks:
    """Line numbers (1-based) of every key and value, by path tuple."""

    def __init__(self) -> None:
        self.key_line: Dict[Path, int] = {}
        self.value_line: Dict[Path, int] = {}

    def line(self, path: Path) -> Optional[int]:
        """Line of the key at ``path`` (its value's line for list items); walks up to the
        nearest parent that has one."""
        p = tuple(path)
        while True:
            if p in self.key_line:
                return self.key_line[p]
            if p in self.value_line:
                return self.value_line[p]
            if not p:
                return None
            p = p[:-1]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:[^}])*))?\}")


class _Builder:
    """Turns a composed YAML node tree into plain Python values, recording line numbers
    and expanding ``${VAR}`` in scalars. Errors are raised with the line of the node."""

    def __init__(self, filename: str, env: Mapping[str, str]) -> None:
        self.filename = filename
        self.env = env
        self.marks = _Marks()
        self._loader = yaml.SafeLoader("")

    def error(self, line: Optional[int], path: Path, message: str) -> ConfigError:
        return ConfigError(_format(self.filename, line, path, message))

    def build(self, node: yaml.Node, path: Path) -> Any:
        line = node.start_mark.line + 1
        self.marks.value_line.setdefault(path, line)
        if isinstance(node, yaml.MappingNode):
            own_keys = {id(k) for k, _v in node.value if k.tag != "tag:yaml.org,2002:merge"}
            try:
                self._loader.flatten_mapping(node)
            except yaml.YAMLError as exc:
                raise self.error(line, path, f"bad merge key: {exc}") from None
            out: Dict[Any, Any] = {}
            merged_in = set()  # keys that came from a `<<` merge: an own key may override them
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise self.error(key_node.start_mark.line + 1, path,
                                     "a key must be a plain name, not a list or mapping")
                key = self._scalar(key_node, path)
                if not isinstance(key, str):
                    key = str(key) if isinstance(key, (int, float)) and not isinstance(key, bool) else key
                if not isinstance(key, str):
                    raise self.error(key_node.start_mark.line + 1, path, f"key {key!r} must be a string")
                sub = path + (key,)
                own = id(key_node) in own_keys
                if key in out and own and key in merged_in:
                    merged_in.discard(key)
                elif key in out and not own:
                    pass  # pyyaml's rule among merged sources: the later entry wins
                elif key in out:
                    raise self.error(key_node.start_mark.line + 1, sub,
                                     f"key {key!r} appears twice in this mapping (first on line "
                                     f"{self.marks.key_line.get(sub)}); remove one")
                if not own:
                    merged_in.add(key)
                self.marks.key_line[sub] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, sub)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        value = node.value
        if "${" in value and node.tag == "tag:yaml.org,2002:str":
            expanded = self._expand(value, node.start_mark.line + 1, path)
            if node.style is None:  # plain scalar: type it after expansion
                tag = self._loader.resolve(yaml.ScalarNode, expanded, (True, False))
                return self._loader.construct_object(yaml.ScalarNode(tag, expanded))
            return expanded
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.error(node.start_mark.line + 1, path, f"bad value: {exc}") from None

    def _expand(self, text: str, line: int, path: Path) -> str:
        def repl(m: "re.Match[str]") -> str:
            name, default = m.group(1), m.group(2)
            value = self.env.get(name)
            if value is None or value == "":
                if default is not None:
                    return default
                if value is None:
                    raise self.error(line, path, f"environment variable {name} is not set; set it or "
                                                 f"write ${{{name}:-default}}")
            return value
        return _VAR.sub(repl, text)


def _dotted(path: Path) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _format(filename: str, line: Optional[int], path: Path, message: str) -> str:
    where = f"{filename}, line {line}" if line else filename
    return f"{where}, key {_dotted(path)}: {message}"


def _suggest(key: str, valid: Any) -> str:
    valid = list(valid)
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if near:
        return f"unknown key {key!r}; did you mean {near[0]!r}?"
    return f"unknown key {key!r}; valid keys here: {', '.join(valid)}"


# --- the validated configuration -----------------------------------------------------------
@dataclass
class RedisSettings:
    """Where Redis is. ``url == "embedded"`` means: start a private server
    (:mod:`echomq_gevent.embedded`) with its data in ``embedded_dir``."""

    url: str = DEFAULT_REDIS_URL
    embedded_dir: str = "var"
    embedded_port: Optional[int] = None
    embedded_persist: bool = True
    #: socket timeouts, TCP keep-alive and health checks of every client the workers make
    connection: ConnectionSettings = DEFAULT_SETTINGS

    @property
    def embedded(self) -> bool:
        return self.url == EMBEDDED


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
    queues: Dict[str, QueueConfig] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict)
    marks: _Marks = field(default_factory=_Marks, repr=False)
    #: for a configuration not read from a file: names the setting at a key path
    where: Optional[Callable[[Path], str]] = field(default=None, repr=False)

    def error(self, path: Path, message: str) -> ConfigError:
        """A ConfigError naming this file, the line of ``path`` and the key (or, for a
        configuration made from framework settings, the setting)."""
        if self.where is not None:
            return ConfigError(f"{self.where(tuple(path))}: {message}")
        return ConfigError(_format(self.filename, self.marks.line(path), path, message))

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
    builder = _Builder(filename, env)
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
            raise cfg.error((key,), _suggest(key, TOP_LEVEL_KEYS))
    _parse_redis(cfg, data.get("redis"))
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
    _parse_logging(cfg, data.get("logging"))
    cfg.defaults = _parse_options(cfg, data.get("defaults"), ("defaults",), allow_processor=False)
    _parse_queues(cfg, data)
    return cfg


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


def _parse_redis(cfg: Config, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str):
        value = {"url": value}
        cfg.marks.value_line.setdefault(("redis", "url"), cfg.marks.line(("redis",)) or 0)
    if not isinstance(value, dict):
        raise cfg.error(("redis",), f"must be a mapping with url (and embedded), got {value!r}")
    for key in value:
        if key not in REDIS_KEYS:
            raise cfg.error(("redis", key), _suggest(key, REDIS_KEYS))
    if "sentinel" in value:
        if "url" in value:
            raise cfg.error(("redis", "sentinel"), "give either url or sentinel, not both")
        value = dict(value, url=_sentinel_mapping_url(cfg, value["sentinel"]))
    url = value.get("url", DEFAULT_REDIS_URL)
    if not isinstance(url, str) or not (url == EMBEDDED
                                        or re.match(r"(redis|rediss|unix|redis\+sentinel)://", url)):
        raise cfg.error(("redis", "url"), f"must be 'embedded' or a redis://, rediss://, unix:// or "
                                          f"redis+sentinel:// URL, got {redact_url(str(url))!r}")
    if url.startswith("redis+sentinel://"):
        try:
            parse_sentinel_url(url)
        except ValueError as exc:
            raise cfg.error(("redis", "url"), str(exc)) from None
    cfg.redis.url = url
    given = {k: v for k, v in value.items() if k in SETTING_KEYS}
    if given:
        try:
            cfg.redis.connection = ConnectionSettings.from_mapping(given)
        except ConnectionSettingError as exc:
            raise cfg.error(("redis", exc.option), str(exc)) from None
    emb = value.get("embedded")
    if emb is None:
        return
    if url != EMBEDDED:
        raise cfg.error(("redis", "embedded"), f"embedded settings only apply with url: embedded, "
                                               f"but url is {url!r}; remove one of them")
    if not isinstance(emb, dict):
        raise cfg.error(("redis", "embedded"), f"must be a mapping with {', '.join(EMBEDDED_KEYS)}")
    for key, v in emb.items():
        path = ("redis", "embedded", key)
        if key not in EMBEDDED_KEYS:
            raise cfg.error(path, _suggest(key, EMBEDDED_KEYS))
        if key == "dir":
            if not isinstance(v, str) or not v:
                raise cfg.error(path, f"must be a folder name, got {v!r}")
            cfg.redis.embedded_dir = v
        elif key == "port":
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536):
                raise cfg.error(path, f"must be a TCP port 1..65535 or null (unix socket), got {v!r}")
            cfg.redis.embedded_port = v
        elif key == "persist":
            if not isinstance(v, bool):
                raise cfg.error(path, f"must be true or false, got {v!r}")
            cfg.redis.embedded_persist = v


def _sentinel_mapping_url(cfg: Config, value: Any) -> str:
    """The ``redis+sentinel://`` URL a ``redis.sentinel`` mapping stands for."""
    from urllib.parse import quote

    if not isinstance(value, dict):
        raise cfg.error(("redis", "sentinel"), f"must be a mapping with sentinels and service, got {value!r}")
    for key in value:
        if key not in SENTINEL_KEYS:
            raise cfg.error(("redis", "sentinel", key), _suggest(key, SENTINEL_KEYS))
    hosts = value.get("sentinels")
    if not isinstance(hosts, list) or not hosts:
        raise cfg.error(("redis", "sentinel", "sentinels"),
                        f"must be a list of host:port strings (the sentinels), got {hosts!r}")
    for i, item in enumerate(hosts):
        if not isinstance(item, str) or not re.fullmatch(r"[^\s,/@]+:\d{1,5}", item):
            raise cfg.error(("redis", "sentinel", "sentinels", i), f"must be host:port, got {item!r}")
    service = value.get("service")
    if not isinstance(service, str) or not service.strip():
        raise cfg.error(("redis", "sentinel", "service"),
                        f"must be the sentinels' name of the primary (e.g. mymaster), got {service!r}")
    db = value.get("db", 0)
    if isinstance(db, bool) or not isinstance(db, int) or db < 0:
        raise cfg.error(("redis", "sentinel", "db"), f"must be a database number 0.., got {db!r}")
    secrets = {}
    for key in ("username", "password", "sentinel_username", "sentinel_password"):
        v = value.get(key)
        if v is not None and not isinstance(v, str):
            raise cfg.error(("redis", "sentinel", key), "must be a string")
        secrets[key] = quote(v, safe="") if v else ""
    auth = ""
    if secrets["username"] or secrets["password"]:
        auth = secrets["username"] + (":" + secrets["password"] if secrets["password"] else "") + "@"
    query = "&".join(f"{k}={secrets[k]}" for k in ("sentinel_username", "sentinel_password") if secrets[k])
    return (f"redis+sentinel://{auth}{','.join(hosts)}/{quote(service.strip(), safe='')}/{db}"
            + (f"?{query}" if query else ""))


def _parse_logging(cfg: Config, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise cfg.error(("logging",), f"must be a mapping with level and format, got {value!r}")
    for key, v in value.items():
        path = ("logging", key)
        if key not in LOGGING_KEYS:
            raise cfg.error(path, _suggest(key, LOGGING_KEYS))
        allowed = LOG_LEVELS if key == "level" else LOG_FORMATS
        if not isinstance(v, str) or v.lower() not in allowed:
            raise cfg.error(path, f"must be one of {', '.join(allowed)}, got {v!r}")
        if key == "level":
            cfg.log_level = v.lower()
        else:
            cfg.log_format = v.lower()


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
            raise cfg.error(sub, _suggest(key, valid))
        try:
            check_worker_option(key, v)
        except OptionError as exc:
            raise cfg.error(sub, _strip_key(key, str(exc))) from None
        out[key] = v
    return out


def _parse_schedulers(cfg: Config, value: Any, path: Path) -> Dict[str, Dict[str, Any]]:
    """``queues.<name>.schedulers``: id -> {repeat, template}, checked as
    ``Queue.upsert_job_scheduler`` checks them (errors point at the key named)."""
    from .errors import EchoMQError
    from .schedulers import validate_repeat, validate_template

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
                raise cfg.error(sub + (key,), _suggest(key, SCHEDULER_KEYS))
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

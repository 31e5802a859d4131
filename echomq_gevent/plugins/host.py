"""The plugin host: a pluggy PluginManager with the built-ins and the user's plugins,
plus the guarded calls the worker makes.

A :class:`PluginHost` is shared by every worker of a process (one per YAML file);
a bare ``Worker(...)`` builds its own with just the built-ins.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
from typing import Any, Callable, ContextManager, Dict, Iterable, List, Mapping, Optional, Tuple

import pluggy

from . import hookspecs
from .hookspecs import PROJECT, FailureDecision, ProcessorRegistry

log = logging.getLogger("echomq_gevent.plugins")

#: Registered name of the built-in log lines (see ``builtin.BuiltinLogging``).
BUILTIN_LOGGING = "echomq_gevent.builtin_logging"

#: Plugin modules that moved into the package: old name -> new name. An old name still
#: loads (with a warning) when no module of that name can be imported.
RENAMED_PLUGINS = {
    "echomq_logging": "echomq_gevent.contrib.logging",
    "echomq_prometheus": "echomq_gevent.contrib.prometheus",
    "demo": "echomq_gevent.contrib.demo",
}

__all__ = ["PluginHost", "make_plugin_manager", "load_entry_points", "import_plugin_module", "RENAMED_PLUGINS"]


def import_plugin_module(name: str) -> Any:
    """Import the plugin module ``name``; an old name of a shipped plugin
    (:data:`RENAMED_PLUGINS`) that is not importable as such loads the module under its
    new name and logs a warning saying what to write instead.

    Called on the main greenlet while plugins load. Raises ImportError as
    :func:`importlib.import_module` does.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        new = RENAMED_PLUGINS.get(name)
        if new is None or exc.name != name:
            raise
    log.warning("plugin %r is now %r: the old name still works but will be removed; write %r in plugins:",
                name, new, new)
    return importlib.import_module(new)


def make_plugin_manager(modules: Iterable[Any] = (), entry_points: bool = False,
                        builtins: bool = True) -> pluggy.PluginManager:
    """A PluginManager with our hook specs, the built-in plugin, the given plugins
    (module names, modules, objects, or ``(name, object)`` pairs to register an object
    under a name) and, if asked, the ``echomq_gevent`` entry points.

    Raises ``ImportError`` naming a module that cannot be imported and
    ``pluggy.PluginValidationError`` for a hook implementation no spec knows.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if builtins:
        from . import builtin

        pm.register(builtin, name="echomq_gevent.builtin")
        pm.register(builtin.BuiltinLogging(), name=BUILTIN_LOGGING)
    if entry_points:
        load_entry_points(pm)
    for mod in modules:
        if isinstance(mod, str):
            try:
                obj = import_plugin_module(mod)
            except ImportError as exc:
                raise ImportError(f"plugin module {mod!r} cannot be imported: {exc}") from exc
            if pm.is_registered(obj):
                continue
            pm.register(obj, name=mod)
        elif isinstance(mod, tuple) and len(mod) == 2 and isinstance(mod[0], str):
            if not pm.is_registered(mod[1]):
                pm.register(mod[1], name=mod[0])
        elif not pm.is_registered(mod):
            pm.register(mod)
    if pm.has_plugin(BUILTIN_LOGGING) and any(
            getattr(p, "REPLACES_BUILTIN_LOGGING", False) for p in pm.get_plugins()):
        pm.unregister(name=BUILTIN_LOGGING)
    pm.check_pending()
    return pm


def load_entry_points(pm: pluggy.PluginManager, group: str = PROJECT) -> None:
    """Register every plugin of the ``group`` entry points of the installed packages.

    Like pluggy's ``load_setuptools_entrypoints`` (a name seen twice, e.g. a package on
    two ``sys.path`` entries, loads once), but a plugin that fails to import raises an
    ``ImportError`` naming the entry point and its package, so the command can say
    which installed plugin is broken.
    """
    from importlib import metadata

    for dist in list(metadata.distributions()):
        for ep in dist.entry_points:
            if ep.group != group or pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                package = dist.metadata["name"] if dist.metadata else "?"
                raise ImportError(
                    f"entry point {ep.name!r} ({ep.value}) of the installed package {package!r} cannot be "
                    f"loaded: {type(exc).__name__}: {exc}; fix or uninstall that package"
                ) from exc
            pm.register(plugin, name=ep.name)


class PluginHost:
    """What the worker calls: look-ups, decisions and guarded telemetry."""

    def __init__(self, pm: Optional[pluggy.PluginManager] = None) -> None:
        self.pm = pm or make_plugin_manager()
        self.registry = ProcessorRegistry()
        self.pm.hook.echomq_register_processors(registry=self.registry)
        self._cache: Dict[Tuple[str, str], Optional[Callable[..., Any]]] = {}

    # -- look-ups and decisions ---------------------------------------------------------
    def get_processor(self, queue: str, job_name: str) -> Optional[Callable[..., Any]]:
        """Processor for ``(queue, job_name)``: the static registry, else the hook (cached)."""
        key = (queue, job_name)
        try:
            return self._cache[key]
        except KeyError:
            pass
        fn = self.registry.get(queue, job_name)
        if fn is None:
            fn = self.pm.hook.echomq_get_processor(queue=queue, job_name=job_name)
        if fn is not None:
            self._cache[key] = fn
        return fn

    def job_context(self, worker: Any, job: Any) -> ContextManager[Any]:
        """One context manager for every ``echomq_job_context`` answer (entered in order,
        exited in reverse); a null context when no plugin implements the hook."""
        hook = self.pm.hook.echomq_job_context
        if not hook.get_hookimpls():
            return contextlib.nullcontext()
        contexts = [c for c in hook(worker=worker, job=job) if c is not None]
        if not contexts:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        try:
            for ctx in contexts:
                stack.enter_context(ctx)
        except BaseException:
            stack.close()
            raise
        return stack

    def failure_decision(self, worker: Any, job: Any, error: BaseException) -> Optional[FailureDecision]:
        """The plugins' decision, or ``None`` for BullMQ's rule. A raising policy plugin is
        logged and treated as ``None``."""
        try:
            decision = self.pm.hook.echomq_failure_decision(worker=worker, job=job, error=error)
        except Exception:
            log.exception("failure policy plugin raised for job %s; using the default rule", getattr(job, "id", "?"))
            return None
        if decision is not None and not isinstance(decision, FailureDecision):
            log.error("failure policy plugin returned %r for job %s, not a FailureDecision; ignored",
                      decision, getattr(job, "id", "?"))
            return None
        return decision

    def backoff_delay(self, backoff_type: str, attempts_made: int, delay: int, error: BaseException,
                      job: Any) -> Optional[int]:
        """Delay (ms) for a backoff type, ``-1`` for "do not retry", ``None`` if unknown."""
        return self.pm.hook.echomq_backoff_delay(backoff_type=backoff_type, attempts_made=attempts_made,
                                                 delay=delay, error=error, job=job)

    # -- producer side -----------------------------------------------------------------
    def add_job(self, queue: Any, name: str, data: Any, opts: Any, add: Callable[..., Any]) -> Any:
        """Run ``add(name, data, opts)`` through the ``echomq_add_job`` hook, so
        producer-side wrappers (tracing) act around it."""
        return self.pm.hook.echomq_add_job(queue=queue, name=name, data=data, opts=dict(opts or {}), add=add)

    def add_bulk(self, queue: Any, jobs: List[Dict[str, Any]], add_bulk: Callable[..., Any]) -> Any:
        """Run ``add_bulk(jobs)`` through the ``echomq_add_bulk`` hook (each job's ``opts``
        a fresh dict the wrappers may change)."""
        fresh = [{"name": j["name"], "data": j["data"],
                  "opts": dict(j["opts"] or {}) if isinstance(j["opts"], Mapping) or not j["opts"] else j["opts"]}
                 for j in jobs]
        return self.pm.hook.echomq_add_bulk(queue=queue, jobs=fresh, add_bulk=add_bulk)

    def add_flows(self, producer: Any, operation: str, flows: List[Any], add: Callable[..., Any]) -> Any:
        """Run ``add(flows)`` through the ``echomq_add_flows`` hook, on a copy of the trees
        whose nodes and options the wrappers may change."""
        return self.pm.hook.echomq_add_flows(producer=producer, operation=operation,
                                             flows=[_copy_node(f) for f in flows], add=add)

    # -- telemetry ---------------------------------------------------------------------
    def notify(self, hook_name: str, **kwargs: Any) -> None:
        """Call every implementation of a telemetry hook; one that raises is logged and
        the others still run.

        Without wrappers the implementations are called here, newest first (pluggy's
        order). When a plugin wraps the hook (``wrapper=True`` or the old
        ``hookwrapper=True``), the call goes through pluggy so the wrapper runs around
        the others; each plain implementation is guarded first, so a raising one is still
        logged and skipped, and a wrapper that raises is logged too.
        """
        hook = getattr(self.pm.hook, hook_name)
        impls = hook.get_hookimpls()
        if not impls:
            return
        if not any(_wraps(impl) for impl in impls):
            for impl in reversed(impls):
                try:
                    impl.function(*[kwargs[a] for a in impl.argnames])
                except Exception:
                    log.exception("telemetry plugin %s raised in %s; ignored", impl.plugin_name, hook_name)
            return
        for impl in impls:
            if not _wraps(impl) and not getattr(impl.function, _GUARDED, False):
                impl.function = _guarded(impl.function, impl.plugin_name, hook_name)
        try:
            hook(**kwargs)
        except Exception:
            log.exception("a telemetry wrapper of %s raised; ignored", hook_name)


_GUARDED = "__echomq_guarded__"


def _copy_node(node: Any) -> Any:
    """A flow node with its own dict, ``opts`` dict and ``children`` list (anything that
    is not a node is left for the FlowProducer to refuse)."""
    if not isinstance(node, Mapping):
        return node
    out = dict(node)
    if isinstance(out.get("opts"), Mapping):
        out["opts"] = dict(out["opts"])
    children = out.get("children")
    if isinstance(children, (list, tuple)):
        out["children"] = [_copy_node(c) for c in children]
    return out


def _wraps(impl: Any) -> bool:
    """A wrapper implementation: new style (``wrapper=True``, pluggy >= 1.1) or old
    (``hookwrapper=True``)."""
    return bool(getattr(impl, "wrapper", False) or getattr(impl, "hookwrapper", False))


def _guarded(fn: Callable[..., Any], plugin_name: str, hook_name: str) -> Callable[..., Any]:
    """``fn`` that logs and swallows its exception (a telemetry plugin never fails a job)."""
    import functools

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            log.exception("telemetry plugin %s raised in %s; ignored", plugin_name, hook_name)
            return None

    setattr(call, _GUARDED, True)
    return call

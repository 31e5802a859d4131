"""Comments and docstrings that point into docs/protocol.md name sections it has, and the
guides (README.md, docs/*.md) name modules, classes, methods, hooks and files that exist."""
from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CITE = re.compile(r'docs/protocol\.md,?\s+"([^"]+)"')
OLD_STYLE = re.compile(r"protocol\s+§\s*\d")


def _headings() -> set:
    with open(os.path.join(ROOT, "docs", "protocol.md"), encoding="utf-8") as fh:
        return {re.sub(r"^#+\s*", "", line).strip() for line in fh if line.startswith("#")}


def _sources():
    for top in ("echomq_gevent", "lua", "tests"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "__pycache__")]
            for f in files:
                if f.endswith((".py", ".lua")) and f != os.path.basename(__file__):
                    yield os.path.join(folder, f)


def test_citations_name_existing_sections():
    headings = _headings()
    cited = 0
    for path in _sources():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        assert not OLD_STYLE.search(text), f"{path}: cite docs/protocol.md by section name, not by number"
        for name in CITE.findall(text):
            cited += 1
            assert name in headings, f'{path}: docs/protocol.md has no section "{name}"'
    assert cited > 10  # the scan found the citations


# --- the guides name only what exists --------------------------------------------------------
GUIDES = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                          if f.endswith(".md")]
CODE_SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"\b(echomq_gevent(?:\.[A-Za-z_]\w*)+)")
#: ``Queue.add_bulk``: a public class and a snake_case attribute (Node's camelCase names,
#: which docs/node-api.md cites on purpose, are left out)
CLASS_ATTR = re.compile(r"(?<![\w.])(Queue|Worker|Job|QueueEvents|QueueEventsProducer|FlowProducer|JobScheduler|"
                        r"ConnectionSettings|FailureDecision|PluginHost|Runner|Dashboard|EchoMQMiddleware)"
                        r"\.([a-z_][a-z0-9_]*)\b(?![A-Za-z])")
HOOK = re.compile(r"\b(echomq_(?:job|worker|add|register|get|failure|backoff)_[a-z_]+)\b")
#: a hook name a guide spells wrong on purpose (the typo the host refuses)
NOT_HOOKS = {"echomq_job_complete", "echomq_job_duration_seconds"}
#: Node's names in docs/node-api.md's Node column that look like ours
NODE_NAMES = {"Job.create"}
REPO_PATH = re.compile(r"(?<![\w/.-])((?:echomq_gevent|tests|conf|lua|bench|examples|plugins|docs|constraints)"
                       r"/[\w./*-]*[\w*])")


def _loggers() -> set:
    """The logger names the package logs under (a guide names them to configure logging)."""
    found = set()
    for path in _sources():
        if os.sep + "echomq_gevent" + os.sep in path:
            with open(path, encoding="utf-8") as fh:
                found.update(re.findall(r'getLogger\("([\w.]+)"\)', fh.read()))
    return found


def _module_file(name: str) -> bool:
    """Whether the module ``name`` has a file, without running it (its package must import)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _resolve(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute of one, at its current path (an old
    module name that still imports with a DeprecationWarning does not count)."""
    import importlib
    import warnings

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DeprecationWarning)
                obj = importlib.import_module(".".join(parts[:i]))
        except DeprecationWarning:
            return False
        except ImportError as exc:
            missing = getattr(exc, "name", None) or ""
            if missing and missing.split(".")[0] != "echomq_gevent" and _module_file(".".join(parts[:i])):
                return True  # the module is there; an optional dependency of it is not installed here
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def _classes() -> dict:
    from echomq_gevent import (ConnectionSettings, FailureDecision, FlowProducer, Job, JobScheduler, Queue,
                               QueueEvents, QueueEventsProducer, Worker)
    from echomq_gevent.contrib.dashboard import Dashboard
    from echomq_gevent.contrib.wsgi import EchoMQMiddleware
    from echomq_gevent.plugins.host import PluginHost
    from echomq_gevent.host.runner import Runner

    return {c.__name__: c for c in (Queue, Worker, Job, QueueEvents, QueueEventsProducer, FlowProducer,
                                    JobScheduler, ConnectionSettings, FailureDecision, PluginHost, Runner,
                                    Dashboard, EchoMQMiddleware)}


def _spans():
    for guide in GUIDES:
        with open(os.path.join(ROOT, guide), encoding="utf-8") as fh:
            text = fh.read()
        for m in CODE_SPAN.finditer(text):
            yield guide, text.count("\n", 0, m.start()) + 1, m.group(1)


def test_the_guides_name_modules_classes_methods_hooks_and_files_that_exist():
    from echomq_gevent.plugins import hookspecs
    from echomq_gevent.plugins.host import BUILTIN_LOGGING  # a plugin's registered name, not a module

    classes = _classes()
    loggers = _loggers()
    hooks = {n for n in dir(hookspecs) if n.startswith("echomq_")}
    wrong = []
    seen = 0
    for guide, line, span in _spans():
        for dotted in DOTTED.findall(span):
            seen += 1
            if not dotted.endswith((".py", ".yaml")) and dotted not in loggers and dotted != BUILTIN_LOGGING \
                    and not _resolve(dotted):
                wrong.append(f"{guide}:{line}: {dotted}")
        for cls, attr in CLASS_ATTR.findall(span):
            seen += 1
            if not hasattr(classes[cls], attr) and f"{cls}.{attr}" not in NODE_NAMES:
                wrong.append(f"{guide}:{line}: {cls}.{attr}")
        for hook in HOOK.findall(span):
            seen += 1
            if hook not in hooks and hook not in NOT_HOOKS and not hook.endswith(("_total", "_seconds")):
                wrong.append(f"{guide}:{line}: hook {hook}")
        for path in REPO_PATH.findall(span):
            seen += 1
            # folders that `make` creates (npm ci, virtual environments) are not in a clone
            made = "node_modules" in path or "/.venv" in path
            if not made and not glob.glob(os.path.join(ROOT, path)):
                wrong.append(f"{guide}:{line}: file {path}")
    assert seen > 200  # the scan found the references
    assert not wrong, "the guides name what does not exist:\n" + "\n".join(wrong)


def test_the_guides_give_every_hook_its_arguments():
    """``echomq_job_retried(worker, job, error, delay_ms)`` in a guide lists exactly the
    arguments of the hook specification, in its order, and docs/plugins.md so describes
    every hook."""
    import inspect

    from echomq_gevent.plugins import hookspecs

    wrong = []
    seen = 0
    in_plugins_guide = set()
    for guide, line, span in _spans():
        m = re.fullmatch(r"(echomq_\w+)\(([^)]*)\).*", span)
        if not m or not hasattr(hookspecs, m.group(1)):
            continue
        seen += 1
        if guide == os.path.join("docs", "plugins.md"):
            in_plugins_guide.add(m.group(1))
        spec = list(inspect.signature(getattr(hookspecs, m.group(1))).parameters)
        given = [a.strip() for a in m.group(2).split(",") if a.strip()]
        if given != spec:
            wrong.append(f"{guide}:{line}: {m.group(1)}({', '.join(given)}), the spec has ({', '.join(spec)})")
    assert seen >= 15
    assert not wrong, "\n".join(wrong)
    hooks = {n for n in dir(hookspecs) if n.startswith("echomq_")}
    assert not hooks - in_plugins_guide, f"docs/plugins.md does not describe {sorted(hooks - in_plugins_guide)}"

"""The package's modules import each other without cycles: every import counts, at module
level or inside a function, so each module can be read, loaded and tested on its own."""
from __future__ import annotations

import ast
import os
from typing import Dict, List, Set

import echomq_gevent

PACKAGE = "echomq_gevent"
ROOT = os.path.dirname(os.path.abspath(echomq_gevent.__file__))


def _modules() -> Dict[str, str]:
    found = {}
    for folder, _dirs, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), ROOT)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join([PACKAGE] + rel)] = os.path.join(folder, f)
    return found


def _imports(name: str, path: str, modules: Dict[str, str]) -> Set[str]:
    is_package = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    out: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            for alias in node.names:  # ``from . import backoff``: the submodule itself
                if f"{target}.{alias.name}" in modules:
                    out.add(f"{target}.{alias.name}")
    return {m for m in out if m in modules and m != name}


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    # a submodule's import of its own package (``from . import __version__``) runs after
    # the package's __init__ has loaded; only edges between modules are cycles
    return {name: {m for m in _imports(name, path, modules) if not name.startswith(m + ".")}
            for name, path in modules.items()}


def test_the_walk_sees_the_package():
    graph = _graph()
    assert "echomq_gevent.worker" in graph and "echomq_gevent.contrib.gunicorn" in graph
    assert "echomq_gevent.worker_fetch" in graph["echomq_gevent.worker"]
    assert "echomq_gevent.hookspecs" in graph["echomq_gevent.plugins"]  # ``from . import hookspecs``


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_nothing_below_the_worker_imports_it():
    graph = _graph()
    below = ["keys", "scripts", "kept_connection", "job", "job_options", "errors", "locks", "stalled",
             "backoff", "runtime", "hub", "connection"]
    for name in below:
        module = f"{PACKAGE}.{name}"
        assert not {m for m in graph[module] if m.startswith(f"{PACKAGE}.worker")}, module


def test_loading_a_configuration_imports_neither_redis_nor_ssl(tmp_path):
    """gunicorn's master imports the integration and loads the YAML before gevent patches
    the workers: a redis (and with it ssl) imported there stays unpatched in every worker
    and gevent warns (MonkeyPatchWarning) at each boot."""
    import subprocess
    import sys

    conf = tmp_path / "worker.yaml"
    conf.write_text("redis:\n  url: redis+sentinel://:pw@127.0.0.1:26379/mymaster/0\n  socket_timeout: 3\n"
                    "queues:\n  mail: {concurrency: 5}\n")
    code = ("import sys, echomq_gevent.contrib.gunicorn as g, echomq_gevent.config as c\n"
            f"c.load_config({str(conf)!r})\n"
            "c.parse_config('redis: {cluster: [\"127.0.0.1:7000\"]}\\nprefix: \"{b}\"\\nqueues: {q: {}}')\n"
            "print(sorted(m for m in ('redis', 'ssl') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

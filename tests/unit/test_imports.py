"""The package's modules import each other without cycles and only down the layers: every
import that runs counts, at module level or inside a function (those for type checkers
only do not), so each module can be read, loaded and tested on its own."""
from __future__ import annotations

import ast
import os
from typing import Dict, List, Optional, Set

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
    return {m for m in _targets(name, path, modules) if m in modules and m != name}


def _targets(name: str, path: str, modules: Dict[str, str]) -> Set[str]:
    """The absolute names of the modules ``name`` imports when it runs, whether a file holds
    them or not (a moved name of 0.1 has none)."""
    is_package = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    out: Set[str] = set()
    # imports for type checkers only (``if TYPE_CHECKING:``) never run: no cycle, no layer
    type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                 for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
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
                if f"{target}.{alias.name}" in modules or f"{target}.{alias.name}" in echomq_gevent.MOVED_MODULES:
                    out.add(f"{target}.{alias.name}")
    return out


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


#: The layers, lowest first: a module may import its own layer and the ones before it.
#: ``errors`` and ``_lazy`` sit under everything; ``contrib`` is the integrations on top.
LAYERS = ["errors", "_lazy", "connection", "protocol", "queue", "relay", "plugins", "worker", "host", "contrib"]
#: Imports that point up, each with its reason: the command serves the dashboard
#: (subcommands) and runs the demo (its config file, its producer), both shipped in contrib.
UPWARD = {
    ("echomq_gevent.host.subcommands", "echomq_gevent.contrib.dashboard"),
    ("echomq_gevent.host.invocation", "echomq_gevent.contrib"),
    ("echomq_gevent.host.invocation", "echomq_gevent.contrib.demo"),
    ("echomq_gevent.host.launch", "echomq_gevent.contrib"),
    ("echomq_gevent.host.launch", "echomq_gevent.contrib.demo"),
}


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__main__", "testing"):
        # the package's face, ``python -m`` and the testing kit's face (its pytest plugin)
        # may import anything
        return len(LAYERS)
    assert parts[1] in LAYERS, f"{module}: a module outside the layers; add its folder to LAYERS"
    return LAYERS.index(parts[1])


def _upward(graph: Dict[str, Set[str]]) -> List[str]:
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                  if _layer(d) > _layer(m) and (m, d) not in UPWARD)


def test_the_walk_sees_the_package():
    graph = _graph()
    assert "echomq_gevent.worker.worker" in graph and "echomq_gevent.contrib.gunicorn" in graph
    assert "echomq_gevent.worker.fetch" in graph["echomq_gevent.worker.worker"]
    assert "echomq_gevent.plugins.hookspecs" in graph["echomq_gevent.plugins.host"]  # ``from . import hookspecs``


def test_the_walk_sees_imports_inside_functions_but_not_those_for_type_checkers(tmp_path):
    """A cycle closed by an import inside a function is a cycle (it runs on the first call);
    one closed by an ``if TYPE_CHECKING:`` import is not (it never runs)."""
    path = tmp_path / "part.py"
    path.write_text("from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from .job import Job\n"
                    "def explain(job):\n    from ..errors import error_for_code\n    return error_for_code\n")
    modules = {"echomq_gevent.queue.part": str(path), "echomq_gevent.queue.job": "", "echomq_gevent.errors": ""}
    assert _imports("echomq_gevent.queue.part", str(path), modules) == {"echomq_gevent.errors"}


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_layer_check_finds_an_import_that_points_up():
    graph = {"echomq_gevent.protocol.keys": {"echomq_gevent.worker.fetch"}, "echomq_gevent.worker.fetch": set()}
    assert _upward(graph) == ["echomq_gevent.protocol.keys -> echomq_gevent.worker.fetch"]


def test_imports_only_point_down_the_layers():
    assert _upward(_graph()) == []


def test_the_top_level_shows_the_layers():
    """``ls echomq_gevent`` is the architecture: one folder a layer, and no module whose
    name begins with another module's (or folder's) name in the same folder."""
    top = sorted(n for n in os.listdir(ROOT) if not n.startswith((".", "__pycache__")))
    folders = [n for n in top if os.path.isdir(os.path.join(ROOT, n)) and n != "lua"]
    assert sorted(folders) == sorted(set(LAYERS) - {"errors", "_lazy"}), top
    for folder, dirs, files in os.walk(ROOT):
        names = [f[:-3] for f in files if f.endswith(".py") and f != "__init__.py"]
        names += [d for d in dirs if os.path.exists(os.path.join(folder, d, "__init__.py"))]
        for a in names:
            clash = [b for b in names if b != a and b.startswith(a + "_")]
            assert not clash, f"{os.path.relpath(folder, ROOT)}: {clash} begin with {a!r}: make a folder of them"


#: The longest a module of the package may be, in lines (docs/architecture.md, "Module size").
MAX_MODULE_LINES = 600


#: The bench beside the package (``bench/``), held to the same limit: its Python modules,
#: the drivers' among them (the Node drivers and the other files are not Python), not
#: those of the virtualenv ``make bench`` makes in it (``bench/.venv-ours``).
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


def _bench_modules() -> List[str]:
    found = []
    for folder, dirs, files in os.walk(BENCH):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return found


def _too_long(limit: int = MAX_MODULE_LINES, paths: Optional[List[str]] = None) -> List[str]:
    """``path: N lines`` for each module longer than ``limit`` (the package's by default),
    the path from the folder that holds the package or ``bench/``."""
    out = []
    for path in sorted(_modules().values()) if paths is None else paths:
        with open(path, encoding="utf-8") as fh:
            lines = sum(1 for _ in fh)
        if lines > limit:
            top = ROOT if paths is None else BENCH
            out.append(f"{os.path.relpath(path, os.path.dirname(top))}: {lines} lines")
    return out


def test_the_size_check_finds_a_long_module():
    assert _too_long(limit=10)  # the walk reads the modules (many are longer than 10 lines)


def test_no_module_is_longer_than_600_lines():
    """A module past 600 lines holds more than one concern: split it by concern (a part
    that owns its state, a folder of modules), not at the line where it crossed."""
    assert _too_long() == []


def test_the_bench_size_check_walks_the_bench_and_its_folders():
    paths = [os.path.relpath(p, BENCH) for p in _bench_modules()]
    assert "run.py" in paths and os.path.join("drivers", "ours_worker.py") in paths
    assert not [p for p in paths if not p.endswith(".py")]  # the Node drivers, scale_fill.lua, results
    assert "bench" + os.sep + "run.py: " in " ".join(_too_long(limit=10, paths=_bench_modules()))


def test_no_bench_module_is_longer_than_600_lines():
    """The bench keeps the package's rule: a case that grows is split by concern (a folder
    of modules for a section), its public names importable where they were."""
    too_long = _too_long(paths=_bench_modules())
    assert not too_long, f"over {MAX_MODULE_LINES} lines: " + "; ".join(too_long)


def test_the_big_classes_are_made_of_parts_not_mixins():
    """Worker, Queue, Scripts and Job hold their parts as objects made with what they need,
    and inherit nothing: a reader finds what ``self`` has in the one class."""
    from echomq_gevent import Job, Queue, Worker
    from echomq_gevent.protocol.scripts import Scripts

    for cls in (Worker, Queue, Scripts, Job):
        assert cls.__bases__ == (object,), f"{cls.__name__} has the bases {cls.__bases__}"

def test_loading_a_configuration_imports_neither_redis_nor_ssl(tmp_path):
    """gunicorn's master imports the integration and loads the YAML before gevent patches
    the workers: a redis (and with it ssl) imported there stays unpatched in every worker
    and gevent warns (MonkeyPatchWarning) at each boot."""
    import subprocess
    import sys

    conf = tmp_path / "worker.yaml"
    conf.write_text("redis:\n  url: redis+sentinel://:pw@127.0.0.1:26379/mymaster/0\n  socket_timeout: 3\n"
                    "queues:\n  mail: {concurrency: 5}\n")
    code = ("import sys, echomq_gevent.contrib.gunicorn as g, echomq_gevent.host.config as c\n"
            f"c.load_config({str(conf)!r})\n"
            "c.parse_config('redis: {cluster: [\"127.0.0.1:7000\"]}\\nprefix: \"{b}\"\\nqueues: {q: {}}')\n"
            "print(sorted(m for m in ('redis', 'ssl') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_package_imports_no_name_of_0_1_that_moved():
    """The flat modules of 0.1 still import, with a DeprecationWarning a user would see for
    the package's own code if it used them."""
    modules = _modules()
    old = [f"{name} imports {target} (now {echomq_gevent.MOVED_MODULES[target]})"
           for name, path in modules.items() for target in sorted(_targets(name, path, modules))
           if target in echomq_gevent.MOVED_MODULES]
    assert old == []

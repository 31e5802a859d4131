"""Lazy re-exports for a package's ``__init__`` (PEP 562), and the old module names.

A package names its public objects in a table ``{name: submodule}``; the submodule is
imported when the name is first read. The packages stay cheap to import: reading a YAML
file must not import redis (gunicorn's master loads it before gevent patches the workers).

:class:`MovedModules` keeps the flat module names of 0.1
(``echomq_gevent.job_options``...) importable: each loads the module it became, with a
``DeprecationWarning`` naming the new path.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

__all__ = ["lazy_exports", "MovedModules"]


def lazy_exports(package: str, table: Dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``table[name]`` (a module name
    relative to ``package``) on first use and caches the value in the package."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        warnings.warn(f"{self.old} is now {self.new}; the name of 0.1 still works and will be removed "
                      f"in a later release",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        """The module it names is loaded already. The import system has just set its
        ``__spec__`` to the old name's: it gets its own back (else its relative imports
        resolve against the old name's parent package, and ``reload`` looks for the old name)."""
        module.__spec__ = self.spec


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds ``old`` module names of :attr:`moves` (absolute ``old -> new``) as the module
    they became: ``import echomq_gevent.job_options`` gives ``echomq_gevent.protocol.options``,
    the same module object under both names."""

    def __init__(self, moves: Dict[str, str]) -> None:
        self.moves = moves

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        new = self.moves.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))

    @classmethod
    def install(cls, moves: Dict[str, str]) -> "MovedModules":
        for finder in sys.meta_path:
            if isinstance(finder, cls) and finder.moves is moves:
                return finder
        finder = cls(moves)
        sys.meta_path.append(finder)
        return finder

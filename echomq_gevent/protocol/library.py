"""Reading the Lua scripts in ``lua/``: their expanded sources and SHA1 digests.

Each file ``lua/<name>-<numkeys>.lua`` is one script; shared fragments live in
``lua/includes/`` and are pulled in by a line

    --- @include "includes/<fragment>"

which :class:`ScriptLibrary` replaces with the fragment's text (each fragment once per
script, fragments may include others; a cycle or a missing fragment is an error). The
library never talks to Redis: :class:`~echomq_gevent.protocol.scripts.Scripts` loads and calls
the scripts. Also :func:`pack`, the msgpack form of script arguments.
"""
from __future__ import annotations

import os
import re
import threading
from hashlib import sha1
from typing import Any, Dict, List, Optional

import msgpack

__all__ = ["ScriptLibrary", "library", "lua_dir", "pack"]

_INCLUDE = re.compile(r'^\s*---\s*@include\s+"([^"]+)"\s*$', re.M)


def lua_dir() -> str:
    """Folder that holds the scripts: the installed data package, else the source tree."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for candidate in (os.path.join(package, "lua"), os.path.join(os.path.dirname(package), "lua")):
        if os.path.isdir(candidate) and any(f.endswith(".lua") for f in os.listdir(candidate)):
            return candidate
    raise RuntimeError(
        "echomq_gevent cannot find its Lua scripts: neither echomq_gevent/lua (installed) nor "
        "lua/ next to the package (source checkout) exists; reinstall the package"
    )


def pack(value: Any) -> bytes:
    """msgpack exactly as the scripts expect (str as str, bytes as bin, no extensions)."""
    return msgpack.packb(value, use_bin_type=True)


class ScriptLibrary:
    """The expanded sources and SHA1 digests of every script in one folder.

    Thread-safe and process-wide (see :func:`library`); it never talks to Redis.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.sources: Dict[str, str] = {}
        self.shas: Dict[str, str] = {}
        self.numkeys: Dict[str, int] = {}
        for fname in sorted(os.listdir(directory)):
            if not fname.endswith(".lua"):
                continue
            name = fname[:-4]
            m = re.match(r"^(.*)-(\d+)$", name)
            if not m:
                raise RuntimeError(f"{os.path.join(directory, fname)}: a script's file name must end in -<number of keys>.lua")
            source = self._expand(os.path.join(directory, fname), set(), [])
            self.sources[name] = source
            self.shas[name] = sha1(source.encode("utf-8")).hexdigest()
            self.numkeys[name] = int(m.group(2))
        #: sha -> source, to load a script on the cluster node that answered NOSCRIPT
        self.sources_by_sha: Dict[str, str] = {self.shas[n]: src for n, src in self.sources.items()}

    def _expand(self, path: str, seen: set, stack: List[str]) -> str:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()

        def replace(match: "re.Match[str]") -> str:
            rel = match.group(1)
            target = os.path.normpath(os.path.join(self.directory, rel + ".lua"))
            if target in stack:
                raise RuntimeError(f"{path}: include cycle through {rel!r}")
            if target in seen:
                return ""
            if not os.path.exists(target):
                raise RuntimeError(f"{path}: included fragment {rel!r} does not exist ({target})")
            seen.add(target)
            return self._expand(target, seen, stack + [target])

        return _INCLUDE.sub(replace, text)

    def __contains__(self, name: str) -> bool:
        return name in self.sources


_library: Optional[ScriptLibrary] = None
_library_lock = threading.Lock()


def library() -> ScriptLibrary:
    """The process-wide library of the package's scripts (read on first use)."""
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                _library = ScriptLibrary(lua_dir())
    return _library

"""The Lua loader: include expansion, cycles, missing fragments, file names."""
from __future__ import annotations

import os
import re
from hashlib import sha1

import pytest

from echomq_gevent.protocol.scripts import ScriptLibrary, library, lua_dir


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def test_include_expanded_once_and_nested(tmp_path):
    root = str(tmp_path)
    _write(root, "includes/a.lua", "local function a() return 1 end\n")
    _write(root, "includes/b.lua", '--- @include "includes/a"\nlocal function b() return a() end\n')
    _write(root, "main-1.lua",
           '--- @include "includes/a"\n--- @include "includes/b"\nreturn b()\n')
    lib = ScriptLibrary(root)
    src = lib.sources["main-1"]
    assert src.count("local function a()") == 1
    assert src.count("local function b()") == 1
    assert "@include" not in src
    assert src.index("function a") < src.index("function b") < src.index("return b()")
    assert lib.numkeys["main-1"] == 1
    assert lib.shas["main-1"] == sha1(src.encode()).hexdigest()
    assert "main-1" in lib and "includes/a" not in lib


def test_include_cycle_is_an_error(tmp_path):
    root = str(tmp_path)
    _write(root, "includes/x.lua", '--- @include "includes/y"\n')
    _write(root, "includes/y.lua", '--- @include "includes/x"\n')
    _write(root, "s-0.lua", '--- @include "includes/x"\nreturn 0\n')
    with pytest.raises(RuntimeError, match="include cycle through 'includes/x'"):
        ScriptLibrary(root)


def test_missing_fragment_is_an_error(tmp_path):
    root = str(tmp_path)
    _write(root, "s-0.lua", '--- @include "includes/nope"\nreturn 0\n')
    with pytest.raises(RuntimeError, match="included fragment 'includes/nope' does not exist"):
        ScriptLibrary(root)


def test_file_name_needs_key_count(tmp_path):
    root = str(tmp_path)
    _write(root, "noKeys.lua", "return 0\n")
    with pytest.raises(RuntimeError, match="must end in -<number of keys>.lua"):
        ScriptLibrary(root)


def test_real_library_has_add_scripts_fully_expanded():
    lib = library()
    assert os.path.isdir(lua_dir())
    for name, keys in (("addStandardJob-9", 9), ("addDelayedJob-6", 6), ("addPrioritizedJob-9", 9)):
        src = lib.sources[name]
        assert lib.numkeys[name] == keys
        assert "@include" not in src
        # every local function is defined exactly once after expansion
        defs = re.findall(r"local function (\w+)", src)
        assert len(defs) == len(set(defs)), name

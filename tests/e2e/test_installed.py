"""Which package the end-to-end tests exercise, and that it carries what it ships.

By default that is the checkout (editable install); with ``$ECHOMQ_TEST_PYTHON`` set
(CI's wheel stage) it is the wheel installed in that interpreter's environment, and
the tests run from a copy of the test tree that holds no package sources. Each check
below holds for either and fails if the wrong one is imported."""
from __future__ import annotations

import json
import os
import subprocess
import sysconfig

import echomq_gevent

from target import BIN, INSTALLED, PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = """
import json, os, sysconfig
import echomq_gevent
from echomq_gevent.protocol import scripts
from echomq_gevent.contrib import demo, logging, prometheus
from echomq_gevent.contrib.dashboard import render
print(json.dumps({
    "package": os.path.dirname(os.path.abspath(echomq_gevent.__file__)),
    "purelib": sysconfig.get_paths()["purelib"],
    "lua": scripts.lua_dir(),
    "scripts": sorted(scripts.library().sources),  # every script, its includes expanded
    "demo_config": demo.CONFIG if os.path.exists(demo.CONFIG) else None,
    "plugins": [m.__name__ for m in (demo, logging, prometheus)],
    "dashboard_static": render.STATIC,
    "dashboard_assets": [len(render.CSS), len(render.JS)],
}))
"""


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def _probe(tmp_path) -> dict:
    # the same environment the other end-to-end tests give their subprocesses
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([PYTHON, "-c", PROBE], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_tests_import_the_package_they_mean_to():
    package = os.path.dirname(os.path.abspath(echomq_gevent.__file__))
    if INSTALLED:
        assert _under(package, sysconfig.get_paths()["purelib"]), package
        assert not os.path.exists(os.path.join(ROOT, "echomq_gevent")), "the test tree holds package sources"
    else:
        assert package == os.path.join(ROOT, "echomq_gevent"), package


def test_subprocesses_run_the_package_they_mean_to_with_its_lua_demo_file_and_plugins(tmp_path):
    info = _probe(tmp_path)
    if INSTALLED:
        assert _under(info["package"], info["purelib"]), info
        assert _under(info["lua"], info["package"]), info  # the scripts came in the wheel
    else:
        assert info["package"] == os.path.join(ROOT, "echomq_gevent"), info
    assert "moveToActive-11" in info["scripts"] and "moveToFinished-14" in info["scripts"], info
    assert os.path.isdir(os.path.join(info["lua"], "includes")), info
    assert info["demo_config"] and _under(info["demo_config"], info["package"]), info
    # the dashboard's stylesheet and script are data files beside its modules
    assert _under(info["dashboard_static"], info["package"]), info
    assert all(size > 100 for size in info["dashboard_assets"]), info
    assert info["plugins"] == ["echomq_gevent.contrib.demo", "echomq_gevent.contrib.logging",
                               "echomq_gevent.contrib.prometheus"]


def test_the_console_script_reports_the_version(tmp_path):
    out = subprocess.run([os.path.join(BIN, "echomq-gevent"), "--version"], cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(f"echomq-gevent {echomq_gevent.__version__} "), out.stdout

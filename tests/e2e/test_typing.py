"""Type checkers see echomq-gevent's public API: ``mypy --strict`` passes on a user's
fully annotated module (``tests/typing/user_jobs.py``: the package's names, the testing
module, a plugin of hook implementations), and fails on a wrong annotation, so the
types are real (not ``Any``). Against the installed wheel (``.ci/wheel``) mypy finds the
package in site-packages by its ``py.typed``; against the checkout it reads the sources
as an installed package is read (its own errors silenced)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from target import INSTALLED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_MODULE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "typing", "user_jobs.py")


def _mypy(folder: str) -> subprocess.CompletedProcess:
    config = os.path.join(folder, "mypy.ini")
    with open(config, "w") as fh:
        fh.write("[mypy]\nstrict = True\ncache_dir = .mypy_cache\n")
        if not INSTALLED:  # the checkout: read as an installed package is
            fh.write("[mypy-echomq_gevent.*]\nfollow_imports = silent\n")
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    if not INSTALLED:
        env["MYPYPATH"] = ROOT
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", config, "user_jobs.py"], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_users_module_passes_mypy_strict(tmp_path):
    pytest.importorskip("mypy")
    shutil.copy(USER_MODULE, tmp_path / "user_jobs.py")
    done = _mypy(str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout


def test_a_wrong_annotation_fails_it(tmp_path):
    pytest.importorskip("mypy")
    text = open(USER_MODULE).read()
    assert "state: str = queue.get_job_state(job.id)" in text
    (tmp_path / "user_jobs.py").write_text(text.replace("state: str = queue.get_job_state", "state: int = "
                                                                                            "queue.get_job_state"))
    done = _mypy(str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in done.stdout

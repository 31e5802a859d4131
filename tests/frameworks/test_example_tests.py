"""The example shops' own tests, which use the testing kit, run as their developers run
them: `python manage.py test shop` (Django's runner) and pytest in the Flask and Pyramid
shops' folders (the kit's pytest plugin, with the Redis it starts itself)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTEST_ADDOPTS", "DJANGO_SETTINGS_MODULE")}
    root = os.path.dirname(EXAMPLES)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def test_the_django_shops_tests(tmp_path, redis_url):
    pytest.importorskip("django")
    done = subprocess.run([sys.executable, "manage.py", "test", "shop", "-v", "2"],
                          cwd=os.path.join(EXAMPLES, "django_project"), capture_output=True, text=True, timeout=300,
                          env=_env(REDIS_URL=redis_url, SHOP_DB=str(tmp_path / "shop.sqlite3")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_an_order_is_confirmed_by_its_job" in done.stderr and "OK" in done.stderr, done.stderr


def test_the_flask_shops_tests(tmp_path):
    pytest.importorskip("flask_sqlalchemy")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                           str(tmp_path / "tmp")], cwd=os.path.join(EXAMPLES, "flask_app"), capture_output=True,
                          text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout


def test_the_pyramid_shops_tests(tmp_path):
    pytest.importorskip("pyramid_tm")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                           str(tmp_path / "tmp")], cwd=os.path.join(EXAMPLES, "pyramid_app"), capture_output=True,
                          text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout

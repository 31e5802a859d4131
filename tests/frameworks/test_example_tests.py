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


def _pytest_in(folder, tmp_path):
    """pytest in an example's folder, as its developers run it (no REDIS_URL: the kit's
    plugin starts a Redis)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                           str(tmp_path / "tmp")], cwd=os.path.join(EXAMPLES, folder), capture_output=True,
                          text=True, timeout=300, env=_env())


@pytest.mark.parametrize("folder, needs, passed", [("flask_app", "flask_sqlalchemy", 2),
                                                   ("pyramid_app", "pyramid_tm", 1)])
def test_the_flask_and_pyramid_shops_tests(tmp_path, folder, needs, passed):
    pytest.importorskip(needs)
    done = _pytest_in(folder, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{passed} passed" in done.stdout, done.stdout

"""The Sentry plugin works with sentry-sdk 2.x and 3.x and refuses any other major (one it
was not written for) with an error naming the installed release and the fix, instead of a
plugin that imports and then fails in every hook."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _import_with(tmp_path, version: str) -> subprocess.CompletedProcess:
    """Import the plugin in a fresh interpreter whose ``sentry_sdk`` says ``version``
    (a package in front of the real one that carries only the version)."""
    pkg = tmp_path / "sentry_sdk"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"VERSION = {version!r}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    code = textwrap.dedent("""
        try:
            import echomq_gevent.contrib.sentry
        except Exception as exc:
            print(type(exc).__name__, exc)
        else:
            print("imported")
    """)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("version", ["4.0.0", "1.45.1"])
def test_an_unsupported_major_is_refused_naming_the_release_and_the_fix(tmp_path, version):
    out = _import_with(tmp_path, version).stdout
    assert out.startswith("ConfigError"), out
    assert f"sentry-sdk {version} is installed" in out
    assert "pip install 'sentry-sdk>=2,<4'" in out


def test_the_installed_release_imports():
    sentry_sdk = pytest.importorskip("sentry_sdk")
    assert sentry_sdk.VERSION.split(".")[0] in ("2", "3")
    import echomq_gevent.contrib.sentry as plugin
    from echomq_gevent.contrib.sentry import api

    assert plugin.SUPPORTED_SDK == ">=2,<4"
    assert api.SDK_MAJOR == int(sentry_sdk.VERSION.split(".")[0])

"""Which echomq-gevent the tests start in subprocesses.

``$ECHOMQ_TEST_PYTHON`` names the interpreter. CI's wheel stage (``.ci/wheel``) sets it
to a fresh virtual environment that holds only the built wheel and its runtime extras
(``gunicorn``, ``prometheus``, ``embedded``) and runs the tests from a copy of the test
tree outside the checkout, so a file the wheel lacks or a dependency an extra forgets
fails the tests. Unset, it is the interpreter running the tests (the checkout's
``.venv`` with its editable install).
"""
from __future__ import annotations

import os
import sys

#: Interpreter for ``python -m echomq_gevent``, ``python -m gunicorn`` and the like.
PYTHON = os.environ.get("ECHOMQ_TEST_PYTHON") or sys.executable
#: True when the tests run against an installed wheel rather than the checkout.
INSTALLED = bool(os.environ.get("ECHOMQ_TEST_PYTHON"))
#: Folder of that interpreter's console scripts (``echomq-gevent``, ``gunicorn``).
BIN = os.path.dirname(PYTHON)

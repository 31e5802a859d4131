"""The gevent patch of the ``echomq-gevent`` command, before anything imports ``socket``.

Imported first by :mod:`echomq_gevent.host.cli` and by the modules that run its commands
(:mod:`.launch`, :mod:`.subcommands`), so whichever of them a program imports patches
the process (``monkey.patch_all()``) unless the program patched it already. Modules that
use ``ssl``, ``redis``, ``urllib3`` or ``requests`` and were imported before are named
in :data:`PREIMPORTED`, which the command logs as a warning.
"""
from __future__ import annotations

import sys

#: Modules that were already imported when the patch ran (should be none of these).
_IMPORTED = tuple(m for m in ("ssl", "redis", "urllib3", "requests") if m in sys.modules)

from gevent import monkey  # noqa: E402

#: (none when the program patched the process itself before importing them)
PREIMPORTED = () if monkey.is_module_patched("socket") else _IMPORTED

if not monkey.is_module_patched("socket"):
    monkey.patch_all()

__all__ = ["PREIMPORTED"]

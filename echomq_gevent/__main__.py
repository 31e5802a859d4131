"""``python -m echomq_gevent``: the same as the ``echomq-gevent`` command.

The CLI module patches the standard library with gevent when it is imported, so it
is imported before anything else here.
"""
import sys

from .host.cli import main

sys.exit(main())

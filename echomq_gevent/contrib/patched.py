"""Run a program with the process patched for gevent first.

::

    python -m echomq_gevent.contrib.patched path/to/manage.py echomq_worker ...
    python -m echomq_gevent.contrib.patched -m flask --app shop echomq worker ...

The framework worker commands (``manage.py echomq_worker``, ``flask echomq worker``)
start themselves again this way when the framework was imported before gevent patched
the process: Django's connection storage and SQLAlchemy's pool locks are made at import
or app creation time, and only patched ones keep each job greenlet's connection its own
and let a greenlet that waits for a connection yield to the others.

Importing the module (for :func:`restart_patched`) patches nothing: patching a process
that has loaded the framework already walks every object it holds, and a lazy one (such
as Django admin's default site, made by some packages' imports) would be set up there.
"""
if __name__ == "__main__":  # run as the program: patch before anything else is imported
    from gevent import monkey

    monkey.patch_all()

import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from typing import List  # noqa: E402


def restart_patched(argv: List[str], module: str = "") -> None:
    """Replace this process with the same program, patched first: ``module`` given, as
    ``python -m module argv...``, else as the script ``argv[0]``. Does not return."""
    args = ["-m", module, *argv] if module else list(argv)
    os.execv(sys.executable, [sys.executable, "-m", "echomq_gevent.contrib.patched", *args])


def main() -> None:
    args = sys.argv[1:]
    if not args:
        raise SystemExit("usage: python -m echomq_gevent.contrib.patched (SCRIPT | -m MODULE) [ARGS...]")
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = args
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()

"""The stack trace a failed job stores (its ``stacktrace`` field).

``traceback.format_exception`` on Python 3.11 and later marks the failing part of each
line with ``^`` carets. To place them it walks the code object's positions up to the
failing instruction of every frame and parses the source line again: on the worker's
own frames that came to about 0.3 ms a failure, a fifth of the worker's instructions in
a run where one job in ten fails once (bench/results/history.md, 029bbda). :func:`format_failure`
writes the same text without the caret lines, from the frames' line numbers alone (and
what Python 3.9 and 3.10 wrote anyway): the frames, their source lines, chained causes
and contexts, the exception and its notes.
"""
from __future__ import annotations

import traceback
from typing import List, Set

__all__ = ["format_failure"]

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"

try:  # Python 3.11+: a group's members are formatted by the standard library
    _GROUP: tuple = (BaseExceptionGroup,)  # type: ignore[name-defined]  # noqa: F821
except NameError:  # pragma: no cover - Python 3.9, 3.10
    _GROUP = ()


def _one(err: BaseException) -> List[str]:
    """The lines of one exception of a chain: its frames (if it was raised) and itself."""
    if _GROUP and isinstance(err, _GROUP):
        # its members' tracebacks are part of it: the standard format, carets and all
        return traceback.format_exception(type(err), err, err.__traceback__, chain=False)
    lines: List[str] = []
    tb = err.__traceback__
    if tb is not None:
        lines.append("Traceback (most recent call last):\n")
        # lookup_lines=False: the source lines come from linecache's memory when the
        # frames are formatted, without a stat of every file on every failure
        lines.extend(traceback.StackSummary.extract(traceback.walk_tb(tb), lookup_lines=False).format())
    lines.extend(traceback.format_exception_only(type(err), err))
    return lines


def format_failure(err: BaseException) -> str:
    """``err`` as ``traceback.format_exception`` formats it, without the caret lines and
    without the final newline. An error that carries the text of a traceback taken in
    another process (``remote_traceback``: a processor run under ``offload: process``)
    is that text."""
    remote = getattr(err, "remote_traceback", None)
    if isinstance(remote, str) and remote:
        return remote
    chain = []
    seen: Set[int] = set()
    current = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        cause = current.__cause__
        if cause is not None:
            chain.append((current, _CAUSE))
            current = cause
        elif current.__context__ is not None and not current.__suppress_context__:
            chain.append((current, _CONTEXT))
            current = current.__context__
        else:
            chain.append((current, ""))
            current = None
    lines: List[str] = []
    # the innermost cause first, then each exception that followed it
    for i in range(len(chain) - 1, -1, -1):
        exc = chain[i][0]
        lines.extend(_one(exc))
        if i > 0:
            lines.append(chain[i - 1][1])
    return "".join(lines).rstrip("\n")

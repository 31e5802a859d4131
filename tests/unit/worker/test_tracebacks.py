"""The stored stack trace: the standard library's text without its caret lines."""
from __future__ import annotations

import sys
import traceback

import pytest

from echomq_gevent.worker.tracebacks import format_failure


def _standard(err: BaseException) -> str:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__)).rstrip("\n")
    # Python 3.11+ marks the failing part of a line with a line of ^ (and ~) under it
    return "\n".join(line for line in text.split("\n") if not (line.strip() and set(line.strip()) <= set("^~")))


def _caught(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: B902 - the test wants whatever it raised
        return exc
    raise AssertionError("did not raise")


def _inner(x):
    values = {"a": [1, 2, 3]}
    return values["a"][x] / (x - x)


def _plain():
    _inner(1)


def _caused():
    try:
        _inner(2)
    except ZeroDivisionError as exc:
        raise ValueError("the job's data is wrong") from exc


def _in_handler():
    try:
        {}["missing"]
    except KeyError:
        _inner(0)


def _suppressed():
    try:
        {}["missing"]
    except KeyError:
        raise RuntimeError("nothing to see") from None


def _three_deep():
    try:
        _caused()
    except ValueError:
        raise LookupError("while reporting")


def _recursive(n):
    return _recursive(n + 1) if n < 40 else _inner(1)


@pytest.mark.parametrize("fn", [_plain, _caused, _in_handler, _suppressed, _three_deep, lambda: _recursive(0)],
                         ids=["plain", "cause", "context", "suppressed", "three", "recursion"])
def test_the_standard_text_without_carets(fn):
    err = _caught(fn)
    ours = format_failure(err)
    assert ours == _standard(err)
    assert ours.startswith("Traceback (most recent call last):\n")
    assert "^" not in ours


def test_the_lines_that_matter_are_there():
    text = format_failure(_caught(_caused))
    assert "ZeroDivisionError: division by zero" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert text.endswith("ValueError: the job's data is wrong")
    assert 'return values["a"][x] / (x - x)' in text  # the source line of the frame


def test_an_exception_never_raised_has_no_traceback():
    assert format_failure(RuntimeError("made, not raised")) == "RuntimeError: made, not raised"


def test_a_cycle_of_contexts_ends():
    a, b = _caught(_plain), RuntimeError("b")
    b.__context__ = a
    a.__context__ = b
    text = format_failure(b)
    assert text.count("ZeroDivisionError") == 1 and text.endswith("RuntimeError: b")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="notes and exception groups came with Python 3.11")
def test_notes_and_groups():
    err = _caught(_plain)
    err.add_note("job 42 of queue mail")
    assert format_failure(err).endswith("ZeroDivisionError: division by zero\njob 42 of queue mail")

    def group():
        raise ExceptionGroup("two went wrong", [_caught(_plain), ValueError("v")])  # noqa: F821

    text = format_failure(_caught(group))
    assert "ExceptionGroup: two went wrong (2 sub-exceptions)" in text
    assert "ZeroDivisionError: division by zero" in text and "ValueError: v" in text

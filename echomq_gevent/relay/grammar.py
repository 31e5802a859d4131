"""Relay topics, patterns and ids, checked before anything is sent to Redis.

The grammar is the one the relay's Lua scripts enforce (``lua/includes/relayTopics.lua``):
a topic is 1 to 16 dot-separated segments of ``[A-Za-z0-9_:%-]`` (anything else
percent-encoded by the caller, see :func:`encode_segment`), 512 characters at most; a
pattern may also hold ``*`` (one segment) and, last, ``>`` (one or more trailing
segments); node ids, namespaces and endpoint ids are ``[A-Za-z0-9_-]{1,64}``. Checking
here gives an error that says what is wrong; the scripts check again, so a client that
skips these checks still cannot write a bad route.
"""
from __future__ import annotations

import re
from typing import Any, List
from urllib.parse import quote

from .errors import INVALID_ID, INVALID_PATTERN, INVALID_TOPIC, RelayError

__all__ = ["check_topic", "check_pattern", "check_id", "encode_segment", "is_wildcard", "MAX_TOPIC_LENGTH",
           "MAX_SEGMENTS"]

MAX_TOPIC_LENGTH = 512
MAX_SEGMENTS = 16
_SEGMENT = re.compile(r"[A-Za-z0-9_:%\-]+\Z")
_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}\Z")


def _problem(text: Any, wildcards: bool) -> str:
    """What is wrong with ``text`` as a topic (or pattern), or "" when it is valid."""
    kind = "pattern" if wildcards else "topic"
    if not isinstance(text, str):
        return f"a {kind} must be a string, got {type(text).__name__}"
    if not text:
        return f"the {kind} is empty"
    if len(text) > MAX_TOPIC_LENGTH:
        return f"the {kind} has {len(text)} characters, more than {MAX_TOPIC_LENGTH}"
    parts = text.split(".")
    if len(parts) > MAX_SEGMENTS:
        return f"the {kind} has {len(parts)} segments, more than {MAX_SEGMENTS}"
    for i, part in enumerate(parts):
        if wildcards and (part == "*" or (part == ">" and i == len(parts) - 1)):
            continue
        if part == ">" and wildcards:
            return f"'>' may only be the last segment of a pattern ({text!r})"
        if part in ("*", ">"):
            return f"a topic has no wildcards ({part!r} in {text!r}); publish on a concrete topic"
        if not part:
            return f"segment {i + 1} of {text!r} is empty (two dots, or a dot at an end)"
        if not _SEGMENT.match(part):
            return (f"segment {part!r} of {text!r} holds characters other than letters, digits and '_:%-' "
                    f"(percent-encode them, e.g. with echomq_gevent.relay.encode_segment)")
    return ""


def check_topic(topic: Any) -> str:
    """``topic`` if it is a valid concrete topic; else :class:`RelayError` (-1) saying why."""
    problem = _problem(topic, False)
    if problem:
        raise RelayError.from_code(INVALID_TOPIC, repr(topic), problem)
    return topic


def check_pattern(pattern: Any) -> str:
    """``pattern`` if it is a valid topic or pattern; else :class:`RelayError` (-2)."""
    problem = _problem(pattern, True)
    if problem:
        raise RelayError.from_code(INVALID_PATTERN, repr(pattern), problem)
    return pattern


def check_id(what: str, value: Any) -> str:
    """``value`` if it is a valid relay id (``what`` names it in the error: "namespace",
    "node_id"...); else :class:`RelayError` (-5)."""
    if not isinstance(value, str) or not _ID.match(value):
        raise RelayError(INVALID_ID, f"Invalid relay {what}: {value!r} (1 to 64 of A-Z, a-z, 0-9, '_' and '-')")
    return value


def is_wildcard(pattern: str) -> bool:
    """Whether a (valid) pattern has a ``*`` or ``>`` segment."""
    parts: List[str] = pattern.split(".")
    return any(p in ("*", ">") for p in parts)


def encode_segment(text: str) -> str:
    """Percent-encode ``text`` into one valid topic segment (``"a.b c"`` -> ``"a%2Eb%20c"``)."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"a topic segment must be a non-empty string, got {text!r}")
    return quote(text, safe="_:-").replace(".", "%2E").replace("~", "%7E")

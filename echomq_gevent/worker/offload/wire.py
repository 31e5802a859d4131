"""The messages between a worker and its ``offload: process`` children.

One frame is a 4-byte big-endian length, then that many bytes of msgpack (a map with an
``op``). Both ends use these two functions: the worker's side reads and writes gevent's
cooperative pipe objects (:mod:`.pool`), the child plain blocking file descriptors
(:mod:`.child`). No gevent here: the child imports it without a hub.

What crosses, parent to child: ``load`` (processor specs to import, answered ``loaded``
or ``load_error``), ``run`` (a spec and the job's fields), ``reply`` (the answer to a
``call``). Child to parent: ``call`` (``job.update_progress``/``log``/``update_data``
for the parent to perform), then ``result`` or ``error`` (type, message, traceback).
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Dict, Optional

import msgpack

__all__ = ["encode", "read_frame", "MAX_FRAME", "WireError"]

_HEADER = struct.Struct(">I")
#: Largest frame either side accepts (a job's data or return value of this size is refused).
MAX_FRAME = 512 * 1024 * 1024


class WireError(Exception):
    """A frame that cannot be read (a bad length, or bytes that are not a msgpack map)."""


def encode(message: Dict[str, Any]) -> bytes:
    """``message`` as one frame. Raises TypeError for a value msgpack cannot carry."""
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise ValueError(f"a message of {len(body)} bytes is larger than {MAX_FRAME} bytes")
    return _HEADER.pack(len(body)) + body


def _read_exactly(read: Callable[[int], Optional[bytes]], n: int) -> Optional[bytes]:
    """``n`` bytes from ``read`` (which may return fewer), or None when it ends first."""
    chunks = []
    left = n
    while left:
        chunk = read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(read: Callable[[int], Optional[bytes]]) -> Optional[Dict[str, Any]]:
    """Read one frame with ``read(n)`` (a pipe's read: up to ``n`` bytes, empty or None at
    the end). Returns the message, or None at end of stream (also in the middle of a
    frame: the other end closed). Raises :class:`WireError`."""
    header = _read_exactly(read, _HEADER.size)
    if not header or len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise WireError(f"frame of {size} bytes announced, more than {MAX_FRAME}")
    body = _read_exactly(read, size) if size else b""
    if body is None or len(body) < size:
        return None
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:
        raise WireError(f"a frame that is not msgpack: {exc}") from None
    if not isinstance(message, dict) or "op" not in message:
        raise WireError(f"a frame without an op: {message!r:.200}")
    return message

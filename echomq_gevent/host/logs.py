"""Log output for the ``echomq-gevent`` command: text or JSON lines, and a terminal
handler that clears the progress line before each record.

Kept apart from :mod:`echomq_gevent.host.cli` (which monkey-patches on import) so the
gunicorn integration and tests can use the formatter without patching anything.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Any, Dict

__all__ = ["JsonFormatter", "TtyHandler", "setup_logging", "isatty"]

_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``msg`` and every ``extra``
    field (the structured fields of the ``echomq_logging`` plugin: ``event``, ``queue``,
    ``job_id``...). Values that are not JSON types are written with ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        out: Dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TtyHandler(logging.StreamHandler):
    """On a terminal, clear the progress line before each record (it is redrawn)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write("\r\x1b[K")
        except Exception:
            pass
        super().emit(record)


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def setup_logging(level: str = "info", fmt: str = "text", stream: Any = None) -> None:
    """Configure the root logger: ``level`` name, ``fmt`` ``"text"`` or ``"json"``, to
    ``stream`` (stderr). Called once by the CLI on the main greenlet; replaces the root
    logger's handlers."""
    stream = stream or sys.stderr
    handler: logging.Handler = TtyHandler(stream) if isatty(stream) else logging.StreamHandler(stream)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))

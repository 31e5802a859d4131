"""Log output for the ``echomq-gevent`` command: text or JSON lines, and a terminal
handler that clears the progress line before each record.

Kept apart from :mod:`echomq_gevent.host.cli` (which monkey-patches on import) so the
gunicorn integration and tests can use the formatter without patching anything.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Any, Dict, Optional

__all__ = ["JsonFormatter", "TtyHandler", "ProcessLabel", "setup_logging", "isatty"]

#: The record attribute :class:`ProcessLabel` sets (written ``process`` in JSON, ``process=`` in text).
PROCESS_FIELD = "echomq_process"

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
        label = getattr(record, PROCESS_FIELD, None)
        if label is not None:
            out["process"] = label
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_") and key != PROCESS_FIELD:
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


class ProcessLabel(logging.Filter):
    """Names the process on every record of a handler (the supervisor's children and the
    supervisor itself): ``process=<index>/<pid>`` in text, ``"process"`` in JSON."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def filter(self, record: logging.LogRecord) -> bool:
        setattr(record, PROCESS_FIELD, self.label)
        return True


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def setup_logging(level: str = "info", fmt: str = "text", stream: Any = None,
                  process: Optional[str] = None) -> None:
    """Configure the root logger: ``level`` name, ``fmt`` ``"text"`` or ``"json"``, to
    ``stream`` (stderr); ``process`` (``"2/4711"``, ``"supervisor/4700"``) names the process
    on every record when the supervisor runs several. Called once by the CLI on the main
    greenlet; replaces the root logger's handlers."""
    stream = stream or sys.stderr
    handler: logging.Handler = TtyHandler(stream) if isatty(stream) else logging.StreamHandler(stream)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        named = f"process=%({PROCESS_FIELD})s " if process else ""
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)-7s {named}%(name)s: %(message)s"))
    if process:
        handler.addFilter(ProcessLabel(process))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))

"""The trace context a job carries: BullMQ's ``opts.telemetry.metadata`` (a JSON object of
propagation fields), which the OpenTelemetry and Sentry plugins both read and write."""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional

__all__ = ["job_carrier"]

log = logging.getLogger("echomq_gevent.contrib")


def job_carrier(opts: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The propagation fields a job's options carry, or None (none, ``omitContext``, or
    metadata that is not a JSON object)."""
    tel = (opts or {}).get("telemetry")
    if not isinstance(tel, dict) or tel.get("omitContext"):
        return None
    raw = tel.get("metadata")
    if not raw:
        return None
    try:
        carrier = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        log.debug("job telemetry metadata is not JSON: %.200r", raw)
        return None
    return carrier if isinstance(carrier, dict) else None

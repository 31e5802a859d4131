"""The relay's errors: the codes its Lua scripts answer (shared with Node's ``RelayError``,
same numbers and wording) and the checks made before anything is sent."""
from __future__ import annotations

from typing import Any, Optional

from ..errors import EchoMQError

__all__ = ["RelayError", "RelayClosedError", "INVALID_TOPIC", "INVALID_PATTERN", "NODE_NOT_REGISTERED",
           "DATA_TOO_LARGE", "INVALID_ID", "INCOMPATIBLE_LAYOUT", "check_result"]

INVALID_TOPIC = -1
INVALID_PATTERN = -2
NODE_NOT_REGISTERED = -3
DATA_TOO_LARGE = -4
INVALID_ID = -5
INCOMPATIBLE_LAYOUT = -6

#: Node's wording of each code, so that a log line reads the same from either side.
MESSAGES = {
    INVALID_TOPIC: "Invalid topic",
    INVALID_PATTERN: "Invalid topic pattern",
    NODE_NOT_REGISTERED: "Relay node is not registered",
    DATA_TOO_LARGE: "Message data is too large",
    INVALID_ID: "Invalid relay node or endpoint id",
    INCOMPATIBLE_LAYOUT: "The relay namespace is in use by nodes with an incompatible BullMQ version",
}


class RelayError(EchoMQError):
    """A relay call refused: ``code`` is one of the module's codes (Node's
    ``RelayErrorCode``), or 0 for a check of ours that has no script code."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)

    @classmethod
    def from_code(cls, code: int, detail: Optional[str] = None, advice: str = "") -> "RelayError":
        text = MESSAGES.get(code, f"Relay error {code}")
        if detail:
            text += f": {detail}"
        if advice:
            text += f" ({advice})"
        return cls(code, text)


class RelayClosedError(EchoMQError):
    """The relay was closed (or is closing): no new publish or subscription."""


def check_result(result: Any, detail: Optional[str] = None) -> Any:
    """Raise :class:`RelayError` when a script answered a negative code; else return it."""
    if isinstance(result, int) and not isinstance(result, bool) and result < 0:
        raise RelayError.from_code(result, detail)
    return result

"""The relay: publish/subscribe between the nodes of a fleet over Redis, wire-compatible
with Node bullmq 6.7.0's ``Relay`` (``docs/relay.md``)."""
from .errors import RelayClosedError, RelayError
from .grammar import encode_segment
from .relay import PublishResult, Relay, RelayMessage, Subscription

__all__ = ["Relay", "RelayMessage", "PublishResult", "Subscription", "RelayError", "RelayClosedError",
           "encode_segment"]

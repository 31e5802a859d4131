"""The sentry-sdk calls that differ between the majors the Sentry plugin supports, chosen
once, at import, by the installed release; everything else in ``echomq_gevent.contrib.sentry``
(the package) is the same on both.

* sentry-sdk 2.x: a run of a job is a transaction (``continue_trace`` returning it,
  ``start_transaction`` with a ``custom_sampling_context``), the producer's publish span a
  child span; statuses are Sentry's span statuses (``internal_error``, ``aborted``,
  ``cancelled``...); transactions carry the scope's tags and contexts.
* sentry-sdk 3.x: there are no transactions; a run is a root span (a segment) started with
  ``start_span(parent_span=None)`` after ``continue_trace`` put the producer's trace on the
  scope, streamed with the others of its trace. A span's status is ``ok`` or ``error`` only,
  and spans take no tags or contexts: the run's tags and its ``echomq_job`` context go on the
  span as attributes (``echomq_job.<key>`` for the context). The sampling context a
  ``traces_sampler`` receives carries ``echomq_job`` on both.

Any other major is refused with a :class:`~echomq_gevent.errors.ConfigError` naming the
installed release and the supported range.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional

import sentry_sdk

from ...errors import ConfigError

__all__ = ["SUPPORTED_SDK", "SDK_MAJOR", "sdk"]

#: The sentry-sdk releases the plugin works with.
SUPPORTED_SDK = ">=2,<4"


def _major(version: str) -> Optional[int]:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


SDK_VERSION = str(getattr(sentry_sdk, "VERSION", "?"))
SDK_MAJOR = _major(SDK_VERSION)
if SDK_MAJOR not in (2, 3):
    raise ConfigError(f"echomq_gevent.contrib.sentry works with sentry-sdk 2.x and 3.x ({SUPPORTED_SDK}); "
                      f"sentry-sdk {SDK_VERSION} is installed: pip install 'sentry-sdk{SUPPORTED_SDK}' "
                      f"(what the extra echomq-gevent[sentry] brings)")

from sentry_sdk import Scope  # noqa: E402 - after the version check, which names the fix
from sentry_sdk.utils import event_from_exception as _event_from_exception  # noqa: E402


class _Sdk2:
    """sentry-sdk 2.x: transactions."""

    #: a run's outcome as the transaction's status
    STATUS = {"completed": "ok", "moved": "ok", "retried": "internal_error", "failed": "internal_error",
              "lock_lost": "aborted", "handed_back": "cancelled"}

    @staticmethod
    def start_run(headers: Dict[str, str], name: str, op: str, tags: Dict[str, str], context: Dict[str, Any],
                  data: Dict[str, Any], sampling: Dict[str, Any]) -> Any:
        """The run's transaction, continuing ``headers``' trace, set as the scope's span (the
        scope carries ``tags`` and ``context`` already)."""
        txn = sentry_sdk.continue_trace(headers, op=op, name=name, source="task")
        for key, value in data.items():
            txn.set_data(key, value)
        txn = sentry_sdk.start_transaction(txn, custom_sampling_context=sampling)
        Scope.get_current_scope().span = txn
        return txn

    @classmethod
    def end_run(cls, run: Any, outcome: str) -> None:
        run.set_tag("echomq.outcome", outcome)
        run.set_status(cls.STATUS[outcome])

    @staticmethod
    def finish(run: Any) -> None:
        run.finish()

    @staticmethod
    @contextlib.contextmanager
    def publishing(name: str, op: str, data: Dict[str, Any]) -> Iterator[Any]:
        """A child span of the current one."""
        with sentry_sdk.start_span(op=op) as span:
            span.description = name  # the span's name (start_span(name=) came after 2.0)
            for key, value in data.items():
                span.set_data(key, value)
            yield span

    @staticmethod
    def set_data(span: Any, key: str, value: Any) -> None:
        span.set_data(key, value)

    @staticmethod
    def span_headers(span: Any) -> Dict[str, str]:
        headers = {"sentry-trace": span.to_traceparent()}
        baggage = span.to_baggage()
        if baggage is not None:
            headers["baggage"] = baggage.serialize()
        return headers

    @staticmethod
    def event_from_exception(exc_info: Any, mechanism: Dict[str, Any]) -> Any:
        return _event_from_exception(exc_info, client_options=sentry_sdk.get_client().options, mechanism=mechanism)


class _Sdk3:
    """sentry-sdk 3.x: streamed spans, a run a root span."""

    #: a span's status is ``ok`` or ``error``; the ``echomq.outcome`` attribute says which
    STATUS = {"completed": "ok", "moved": "ok", "retried": "error", "failed": "error", "lock_lost": "error",
              "handed_back": "error"}

    @staticmethod
    def start_run(headers: Dict[str, str], name: str, op: str, tags: Dict[str, str], context: Dict[str, Any],
                  data: Dict[str, Any], sampling: Dict[str, Any]) -> Any:
        """The run's root span, in the trace of ``headers`` (a new trace without them), the
        scope's span until it ends."""
        sentry_sdk.continue_trace(headers)
        Scope.set_custom_sampling_context(sampling)
        attributes: Dict[str, Any] = {"sentry.op": op, "sentry.segment.name.source": "task"}
        attributes.update(data)
        attributes.update(tags)
        for key, value in context.items():
            if isinstance(value, (str, bool, int, float)):
                attributes[f"echomq_job.{key}"] = value
        return sentry_sdk.start_span(name=name, attributes=attributes, parent_span=None)

    @classmethod
    def end_run(cls, run: Any, outcome: str) -> None:
        run.set_attribute("echomq.outcome", outcome)
        run.status = cls.STATUS[outcome]

    @staticmethod
    def finish(run: Any) -> None:
        run.end()

    @staticmethod
    @contextlib.contextmanager
    def publishing(name: str, op: str, data: Dict[str, Any]) -> Iterator[Any]:
        """A child span of the current one."""
        with sentry_sdk.start_span(name=name, attributes=dict(data, **{"sentry.op": op})) as span:
            yield span

    @staticmethod
    def set_data(span: Any, key: str, value: Any) -> None:
        span.set_attribute(key, value)

    @staticmethod
    def span_headers(span: Any) -> Dict[str, str]:
        return dict(sentry_sdk.get_current_scope().iter_trace_propagation_headers(span=span))

    @staticmethod
    def event_from_exception(exc_info: Any, mechanism: Dict[str, Any]) -> Any:
        return _event_from_exception(exc_info, mechanism=mechanism)


#: The calls of the installed major.
sdk = _Sdk3 if SDK_MAJOR == 3 else _Sdk2

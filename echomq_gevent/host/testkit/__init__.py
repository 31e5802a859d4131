"""The testing kit's parts (``echomq_gevent.testing`` is its face and pytest plugin):
``drain`` runs a test's jobs with real workers, ``jobs`` inspects what was added, and
``server`` gives a test run its own Redis."""
from .drain import DrainResult, DrainTimeout, JobOutcome, drain
from .jobs import assert_enqueued, enqueued

__all__ = ["drain", "DrainResult", "DrainTimeout", "JobOutcome", "enqueued", "assert_enqueued"]

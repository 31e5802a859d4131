"""The plugin module named by this package's ``echomq_gevent`` entry point.

Two ways to supply processors, both shown:

* :func:`echomq_get_processor` answers by job name, for any queue: the worker asks it
  the first time it meets a ``(queue, job name)`` and caches the answer;
* :func:`echomq_register_processors` fills the static routing table once at start.

Processors are plain functions of the job; what they return (JSON-serialisable)
becomes the job's ``returnvalue``; what they raise fails the attempt (retries apply).
They run on the job's greenlet, so blocking I/O must be gevent-friendly (the CLI
monkey-patches the standard library first).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

from echomq_gevent import hookimpl


def wordcount(job: Any) -> Dict[str, int]:
    text = str((job.data or {}).get("text", ""))
    return {"words": len(text.split()), "chars": len(text)}


def echo(job: Any) -> Any:
    return job.data


def upper(job: Any) -> str:
    return str((job.data or {}).get("text", "")).upper()


BY_NAME: Dict[str, Callable[[Any], Any]] = {"example.wordcount": wordcount, "example.echo": echo}


@hookimpl
def echomq_get_processor(queue: str, job_name: str) -> Optional[Callable[[Any], Any]]:
    return BY_NAME.get(job_name)


@hookimpl
def echomq_register_processors(registry: Any) -> None:
    registry.add(os.environ.get("ECHOMQ_EXAMPLE_QUEUE", "example"), "example.upper", upper)

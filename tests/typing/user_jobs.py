"""A user's module, written against echomq-gevent's public API with full annotations:
``mypy --strict`` must pass on it (tests/e2e/test_typing.py), with the package as a user
installs it (its ``py.typed``)."""
from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

from echomq_gevent import (FailureDecision, FlowProducer, Job, JobScheduler, Queue, QueueEvents,
                           UnrecoverableError, Worker, hookimpl)
from echomq_gevent.plugins.hookspecs import ProcessorRegistry
from echomq_gevent.testing import DrainResult, JobOutcome, assert_enqueued, drain, enqueued


def send_welcome(job: Job) -> Dict[str, Any]:
    data = job.data
    if not isinstance(data, dict) or "email" not in data:
        raise UnrecoverableError(f"job {job.id}: no email in {data!r}")
    job.update_progress(50)
    job.log(f"sending to {data['email']}")
    return {"sent_to": data["email"], "attempt": job.attempts_made + 1}


class Telemetry:
    """A plugin: processors, telemetry and a failure policy."""

    @hookimpl
    def echomq_register_processors(self, registry: ProcessorRegistry) -> None:
        registry.add("emails", "welcome", send_welcome)

    @hookimpl
    def echomq_job_completed(self, worker: Any, job: Job, result: Any, duration_ms: float) -> None:
        print(job.queue_name, job.id, duration_ms)

    @hookimpl
    def echomq_failure_decision(self, worker: Any, job: Job, error: BaseException) -> Optional[FailureDecision]:
        if isinstance(error, TimeoutError):
            return FailureDecision.retry(delay=1000)
        return None


def enqueue(url: str) -> str:
    queue = Queue("emails", connection=url, prefix="bull")
    try:
        job = queue.add("welcome", {"email": "ada@example.com"}, {"attempts": 3})
        counts: Dict[str, int] = queue.get_job_counts("waiting", "failed")
        state: str = queue.get_job_state(job.id)
        found: Optional[Job] = queue.get_job(job.id)
        print(counts, state, found)
        return job.id
    finally:
        queue.close()


def flows(url: str) -> None:
    producer = FlowProducer(connection=url)
    try:
        tree = producer.add({"name": "total", "queueName": "reports", "data": {},
                             "children": [{"name": "part", "queueName": "parts", "data": {"n": 1}}]})
        print(tree["job"].id)
    finally:
        producer.close()


def work(url: str) -> Worker:
    worker = Worker("emails", send_welcome, connection=url, concurrency=10, lock_duration=30000)
    worker.start()
    return worker


def watch(url: str) -> QueueEvents:
    return QueueEvents("emails", connection=url)


def scheduler_type() -> type:
    return JobScheduler


def test_like_a_user(queue: Queue) -> DrainResult:
    assert_enqueued(queue, "welcome", data={"email": "ada@example.com"}, count=1)
    pending: list[Job] = enqueued(queue, "welcome")
    result = drain(queue, {"welcome": send_welcome}, timeout=5.0, raise_errors=True)
    first: JobOutcome = result.completed[0]
    print(len(pending), first.value, result.values, result.reasons)
    return result


def values(result: DrainResult) -> Iterator[Any]:
    yield from result.values

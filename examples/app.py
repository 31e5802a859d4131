"""The example app: plain WSGI, the way many legacy apps still look.

Routes:

* ``GET /``: a trivial page (what a load balancer would hit).
* ``POST /signup?email=a@example.com``: enqueues a ``welcome`` job on the ``mail``
  queue and answers its id at once; a job greenlet of one of the gunicorn workers
  sends the mail.
* ``POST /sleep?n=10&ms=10``: enqueues ``n`` I/O-bound ``sleep`` jobs in one round trip.
* ``GET /jobs/<id>``: the job's state and return value.
* ``/_echomq/live``, ``/_echomq/ready``, ``/_echomq/metrics``: from the middleware.

Every request greenlet enqueues through the one shared ``Queue`` of the process
(:func:`echomq_gevent.contrib.wsgi.get_queue`), whose connection pool is sized for
them.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List
from urllib.parse import parse_qs

from echomq_gevent.contrib.wsgi import EchoMQMiddleware, get_queue

QUEUE = "mail"


def _reply(start_response: Callable[..., Any], code: str, payload: Any) -> List[bytes]:
    body = json.dumps(payload).encode()
    start_response(code, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _query(environ: Dict[str, Any]) -> Dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}


def legacy_app(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    method = environ.get("REQUEST_METHOD", "GET")
    path = environ.get("PATH_INFO", "/")
    q = _query(environ)
    if path == "/" and method in ("GET", "HEAD"):
        body = b"hello\n"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/signup" and method == "POST":
        email = q.get("email", "")
        if "@" not in email:
            return _reply(start_response, "400 Bad Request", {"error": "email=... is required"})
        job = get_queue(QUEUE).add("welcome", {"email": email})
        return _reply(start_response, "202 Accepted", {"job": job.id})
    if path == "/sleep" and method == "POST":
        try:
            n, ms = int(q.get("n", "1")), float(q.get("ms", "10"))
        except ValueError:
            return _reply(start_response, "400 Bad Request", {"error": "n and ms must be numbers"})
        extra = {"report": True} if q.get("report") else {}
        jobs = get_queue(QUEUE).add_bulk([("sleep", dict(ms=ms, **extra), None) for _ in range(n)])
        return _reply(start_response, "202 Accepted", {"jobs": [j.id for j in jobs]})
    if path.startswith("/jobs/") and method == "GET":
        job = get_queue(QUEUE).get_job(path[len("/jobs/"):])
        if job is None:
            return _reply(start_response, "404 Not Found", {"error": "no such job"})
        return _reply(start_response, "200 OK", {"id": job.id, "state": job.get_state(),
                                                 "returnvalue": job.returnvalue})
    return _reply(start_response, "404 Not Found", {"error": f"no route for {method} {path}"})


application = EchoMQMiddleware(legacy_app)

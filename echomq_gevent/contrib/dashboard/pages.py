"""The dashboard's pages: the queues, one queue's jobs, one job, the confirmation of an
action, and the JSON an open queue page polls.

Each function takes the :class:`~echomq_gevent.contrib.dashboard.Dashboard` (``ui``: its
``reads``, ``actions``, ``page_size``, ``prefix`` and ``page()``) and the request, and
returns a response. Every value read from Redis goes through :func:`~.render.h`.
"""
from __future__ import annotations

import json
from typing import Any

from .actions import CANCEL_STATES, CLEAN_STATES, describe
from .reads import STATES
from .render import chart, h, pretty, short, when
from .web import Refused, Request, Response, int_arg, redirect


def _age(age: Any) -> str:
    """The oldest ready job's wait, short (``-`` when no job is ready)."""
    from ...host.status import describe_age

    return "-" if age.oldest_timestamp is None else describe_age(age.age_seconds)


def _age_title(age: Any) -> str:
    if age.oldest_timestamp is None:
        return "no job ready to run"
    return f"job {age.job_id} ({age.state}), ready since {when(age.oldest_timestamp)}"


def overview(ui: Any, req: Request) -> Response:
    """``/``: every queue with its counts, workers and a small chart."""
    rows = []
    seen = {}
    for name in ui.reads.queue_names():
        q = ui.reads.queue(name)
        counts = seen[name] = ui.reads.counts(q)
        age = q.get_queue_age()
        paused = age.paused
        workers = len(q.get_workers())
        cells = "".join(
            f'<td class="n"><a href="{h(req.url("/queue", name=name, state=s))}" '
            f'data-count="{h(s)}">{counts.get(s, 0)}</a></td>' for s in STATES)
        rows.append(
            f'<tr data-queue="{h(name)}"><td><a href="{h(req.url("/queue", name=name))}">{h(name)}</a>'
            f'{" <span class=tag>paused</span>" if paused else ""}</td>{cells}'
            f'<td class="n">{workers}</td>'
            f'<td class="n" data-age="{age.age_seconds:.3f}" title="{h(_age_title(age))}">{h(_age(age))}</td>'
            f'<td>{chart(ui.reads.throughput(q), 160, 32)}</td></tr>')
    head = "".join(f"<th>{h(s)}</th>" for s in STATES)
    discovering = ui.reads.discovering
    notice = ('<p class="notice" id="discovering">Looking for the queues under this prefix (a scan of every '
              'key of the database); this page reloads itself until they are listed.</p>' if discovering else "")
    body = (f"<h1>Queues <small>prefix {h(ui.prefix)}</small></h1>" + notice
            + ("" if discovering and not rows else "<p>No queue found under this prefix.</p>" if not rows else
               f'<table id="queues"><tr><th>queue</th>{head}<th>workers</th><th>oldest ready</th>'
               f'<th>throughput</th></tr>'
               + "".join(rows) + "</table>"))
    from .outbox import outbox_section
    from .pools import pools_section
    from .processes import processes_section

    status, headers, text = ui.page(req, "Queues", body + pools_section(ui, req, seen) + processes_section(ui)
                                    + outbox_section(ui, req))
    if discovering:
        headers = headers + [("Refresh", "1")]
    return status, headers, text


def queue(ui: Any, req: Request) -> Response:
    """``/queue?name=Q[&state=S][&page=N][&id=ID]``: one queue's jobs of a state, paged;
    ``id`` opens that job."""
    name = req.arg("name")
    q = ui.reads.queue(name)
    state = req.arg("state", "waiting")
    if state not in STATES:
        raise Refused("400 Bad Request", f"unknown state {state!r}; use one of {', '.join(STATES)}")
    wanted = req.arg("id", "").strip()
    notice = ""
    if wanted:
        if q.get_job(wanted) is not None:
            return redirect(req.url("/job", queue=name, id=wanted))
        notice = f'<p class="notice">No job with id {h(wanted)} in {h(name)}.</p>'
    page = int_arg(req.arg("page", "1"), "page", 1)
    counts = ui.reads.counts(q)
    total = counts.get(state, 0)
    size = ui.page_size
    start = (page - 1) * size
    jobs = q.get_jobs(state, start, start + size - 1)
    age = q.get_queue_age()
    paused = age.paused
    tabs = "".join(
        f'<a class="tab{" on" if s == state else ""}" href="{h(req.url("/queue", name=name, state=s))}">'
        f'{h(s)} <b data-count="{h(s)}">{counts.get(s, 0)}</b></a>' for s in STATES)
    rows = "".join(
        f'<tr><td><a href="{h(req.url("/job", queue=name, id=j.id))}">{h(j.id)}</a></td>'
        f'<td>{h(j.name)}</td><td>{h(when(j.timestamp))}</td><td>{h(j.attempts_made)}</td>'
        f'<td class="clip">{h(short(j.failed_reason if state == "failed" else j.data))}</td></tr>'
        for j in jobs)
    pages = max(1, -(-total // size))
    nav = []
    if page > 1:
        nav.append(f'<a rel="prev" href="{h(req.url("/queue", name=name, state=state, page=page - 1))}">newer</a>')
    nav.append(f"page {page} of {pages}")
    if page < pages:
        nav.append(f'<a rel="next" href="{h(req.url("/queue", name=name, state=state, page=page + 1))}">older</a>')
    actions = ""
    if ui.actions:
        buttons = [("resume" if paused else "pause", {}, "Resume" if paused else "Pause")]
        if state in CLEAN_STATES:
            buttons.append(("clean", {"state": state}, f"Clean {state}"))
        if state == "failed":
            buttons.append(("retry-all", {}, "Retry all failed"))
        if state == "delayed":
            buttons.append(("promote-all", {}, "Promote all delayed"))
        actions = '<p class="actions">' + " ".join(
            f'<a class="button" data-action="{h(a)}" '
            f'href="{h(req.url("/confirm", queue=name, action=a, **extra))}">{h(label)}</a>'
            for a, extra, label in buttons) + "</p>"
    body = (f'<h1 data-queue="{h(name)}">{h(name)}{" <span class=tag>paused</span>" if paused else ""}</h1>'
            f'<p id="age" data-age="{age.age_seconds:.3f}">oldest job ready to run: {h(_age(age))}'
            f'{" (" + h(_age_title(age)) + ")" if age.oldest_timestamp is not None else ""}</p>'
            f"{req.flash()}{notice}{actions}"
            f'<div class="chart">{chart(ui.reads.throughput(q), 640, 120, axis=True)}</div>'
            f'<form method="get" action="{h(req.url("/queue"))}" class="search">'
            f'<input type="hidden" name="name" value="{h(name)}">'
            f'<input name="id" placeholder="job id" aria-label="job id"> <button>Find</button></form>'
            f'<nav class="tabs">{tabs}</nav>'
            f'<table id="jobs" data-state="{h(state)}"><tr><th>id</th><th>name</th><th>added</th>'
            f'<th>attempts</th><th>{"failed reason" if state == "failed" else "data"}</th></tr>{rows}</table>'
            f'<p class="pager">{" | ".join(nav)}</p>{_schedulers(ui, q)}{_workers(q)}')
    return ui.page(req, name, body, poll=name)


def _schedulers(ui: Any, q: Any) -> str:
    schedulers = ui.reads.schedulers(q)
    if not schedulers:
        return ""
    return ("<h2>Job schedulers</h2><table><tr><th>id</th><th>next run</th><th>details</th></tr>" + "".join(
        f'<tr><td>{h(s.get("id") or s.get("key"))}</td><td>{h(when(s.get("next")))}</td>'
        f'<td><code>{h(short({k: v for k, v in s.items() if k not in ("id", "key", "next")}, 200))}</code></td></tr>'
        for s in schedulers) + "</table>")


def _workers(q: Any) -> str:
    workers = q.get_workers()
    if not workers:
        return "<h2>Workers</h2><p>No worker connected.</p>"
    return ("<h2>Workers</h2>"
            '<table id="workers"><tr><th>connection name</th><th>address</th><th>age (s)</th><th>idle (s)</th></tr>'
            + "".join(f'<tr><td>{h(w.get("rawname"))}</td><td>{h(w.get("addr"))}</td>'
                      f'<td class="n">{h(w.get("age"))}</td><td class="n">{h(w.get("idle"))}</td></tr>'
                      for w in workers) + "</table>")


def job(ui: Any, req: Request) -> Response:
    """``/job?queue=Q&id=ID``: everything about one job, and its action buttons."""
    name = req.arg("queue")
    q = ui.reads.queue(name)
    job_id = req.arg("id")
    job = q.get_job(job_id)
    if job is None:
        raise Refused("404 Not Found", f"no job with id {job_id!r} in queue {name!r}")
    state = q.get_job_state(job_id)
    logs = q.get_job_logs(job_id, 0, 199)
    deps = ui.reads.dependencies(job)
    facts = [("state", state), ("name", job.name), ("added", when(job.timestamp)),
             ("processed", when(job.processed_on)), ("finished", when(job.finished_on)),
             ("attempts made", job.attempts_made), ("attempts started", job.attempts_started),
             ("delay (ms)", job.delay), ("priority", job.priority), ("processed by", job.processed_by or "")]
    facts_html = "".join(f"<tr><th>{h(k)}</th><td>{h(v)}</td></tr>" for k, v in facts)
    parent = ""
    if job.parent_key:
        parent = f"<tr><th>parent</th><td>{_job_link(ui, req, job.parent_key)}</td></tr>"
    sections = [
        ("data", f'<pre id="data">{h(pretty(job.data))}</pre>'),
        ("options", f'<pre id="opts">{h(pretty(job.opts))}</pre>'),
        ("progress", f'<pre id="progress">{h(pretty(job.progress))}</pre>'),
    ]
    if job.returnvalue is not None or state == "completed":
        sections.append(("return value", f'<pre id="returnvalue">{h(pretty(job.returnvalue))}</pre>'))
    if job.failed_reason:
        sections.append(("failed reason", f'<pre id="failedReason">{h(job.failed_reason)}</pre>'))
    if job.stacktrace:
        sections.append(("stack trace", "".join(f'<pre class="stack">{h(s)}</pre>' for s in job.stacktrace)))
    if job.decode_error:
        sections.append(("decoding problem", f"<pre>{h(job.decode_error)}</pre>"))
    sections.append((f"logs ({logs['count']})", '<pre id="logs">' + h("\n".join(logs["logs"])) + "</pre>"))
    if any(deps.values()):
        items = "".join(f"<li>{h(kind)}: {_job_link(ui, req, key)}</li>"
                        for kind, keys in deps.items() for key in keys)
        sections.append(("children", f'<ul id="children">{items}</ul>'))
    actions = ""
    if ui.actions:
        buttons = []
        if state in ("failed", "completed"):
            buttons.append(("retry", "Retry"))
        if state == "delayed":
            buttons.append(("promote", "Promote"))
        if state in CANCEL_STATES:
            buttons.append(("cancel", "Cancel job"))
        buttons.append(("remove", "Remove"))
        actions = '<p class="actions">' + " ".join(
            f'<a class="button" data-action="{h(a)}" '
            f'href="{h(req.url("/confirm", queue=name, action=a, job=job_id, state=state))}">{h(label)}</a>'
            for a, label in buttons) + "</p>"
    body = (f'<h1>Job <span id="job-id">{h(job_id)}</span> <small>in '
            f'<a href="{h(req.url("/queue", name=name, state=state if state in STATES else "waiting"))}">'
            f"{h(name)}</a></small></h1>{req.flash()}{actions}"
            f'<table class="facts">{facts_html}{parent}</table>'
            + "".join(f"<h2>{h(title)}</h2>{content}" for title, content in sections))
    return ui.page(req, f"job {job_id}", body)


def _job_link(ui: Any, req: Request, key: str) -> str:
    """A job key (``<prefix>:<queue>:<id>``) as a link to its page; other text as text."""
    head = ui.prefix + ":"
    if key.startswith(head) and ":" in key[len(head):]:
        queue_name, _, job_id = key[len(head):].rpartition(":")
        return f'<a href="{h(req.url("/job", queue=queue_name, id=job_id))}">{h(key)}</a>'
    return h(key)


def confirm(ui: Any, req: Request) -> Response:
    """``/confirm?queue=Q&action=A[&job=ID][&state=S]``: what the action will do, and the
    form (with the CSRF token) whose button does it."""
    if not ui.actions:
        raise Refused("403 Forbidden", "actions are disabled on this dashboard (read-only)")
    name = req.arg("queue")
    ui.reads.queue(name)
    action = req.arg("action")
    job_id = req.arg("job", "")
    state = req.arg("state", "")
    what = describe(action, name, job_id, state)
    fields = {"queue": name, "action": action, "job": job_id, "state": state, "csrf": req.cookie}
    hidden = "".join(f'<input type="hidden" name="{h(k)}" value="{h(v)}">' for k, v in fields.items() if v)
    grace = ""
    if action == "cancel":
        grace = ('<p><label>reason <input name="reason" value="from the dashboard" size="40" '
                 'maxlength="1000"></label></p>')
    if action == "clean":
        grace = ('<p><label>only jobs older than <input name="grace" value="0" size="8" '
                 'inputmode="numeric"> ms</label></p>')
    back = req.url("/job", queue=name, id=job_id) if job_id else req.url("/queue", name=name)
    body = (f"<h1>Confirm</h1><p id=\"confirm-text\">{h(what)}?</p>"
            f'<form method="post" action="{h(req.url("/action"))}" id="confirm-form">{hidden}{grace}'
            f'<button id="confirm">Yes, {h(action)}</button> <a href="{h(back)}">Cancel</a></form>')
    return ui.page(req, "Confirm", body)


def api_counts(ui: Any, req: Request) -> Response:
    """``/api/counts?queue=Q``: the counts, paused flag and throughput series as JSON
    (what an open queue page polls)."""
    q = ui.reads.queue(req.arg("queue"))
    age = q.get_queue_age()
    payload = {"queue": q.name, "counts": ui.reads.counts(q), "paused": age.paused, "age": age.as_dict(),
               "throughput": ui.reads.throughput(q)}
    return "200 OK", [("Content-Type", "application/json")], json.dumps(payload).encode()

"""A web dashboard for the queues: a plain WSGI app, server-rendered, no build step.

Mount it in any WSGI app, under the gunicorn integration (``/_echomq/ui``, see
:class:`echomq_gevent.contrib.wsgi.EchoMQMiddleware`), or run it alone::

    echomq-gevent -c conf/worker.yaml dashboard --bind 127.0.0.1:8765 [--actions]

    from echomq_gevent.contrib.dashboard import Dashboard, basic_auth
    ui = Dashboard("redis://localhost:6379/0", queues=["mail"], actions=True,
                   auth=basic_auth("ops", os.environ["UI_PASSWORD"]))

Pages: every queue with its counts and a throughput chart; per queue the jobs of each
state (paged, search by id), the job schedulers and the workers connected; per job its
data, options, progress, logs, return value, failure reason, stack trace, parent and
children. Actions (retry, promote, remove, pause/resume, clean, retry all failed,
promote all delayed) are off unless ``actions=True``; each one is confirmed on its own
page and is a POST carrying the CSRF token of the visitor's cookie.

Everything read from Redis is escaped before it reaches the page, and a Content
Security Policy lets only the page's own script (by nonce) run.
"""
from __future__ import annotations

import base64
import binascii
import collections
import hmac
import html
import json
import secrets
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs, urlencode

__all__ = ["Dashboard", "basic_auth", "serve", "STATES"]

#: The job states the pages list, in BullMQ's order of a job's life.
STATES = ("waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed")
#: States a queue can be cleaned of from the page.
CLEAN_STATES = ("completed", "failed", "delayed", "waiting", "prioritized")
CSRF_COOKIE = "echomq_csrf"
MAX_FORM_BYTES = 16 * 1024
#: Count samples kept per queue for the chart when BullMQ metrics are not recorded.
SAMPLES_KEPT = 120
SAMPLE_EVERY_S = 2.0

Environ = Dict[str, Any]
Response = Tuple[str, List[Tuple[str, str]], bytes]


def basic_auth(user: str, password: str, realm: str = "echomq") -> Callable[[Environ], bool]:
    """An ``auth`` callable for :class:`Dashboard` that asks for HTTP Basic credentials."""
    if not user or not password:
        raise ValueError("basic_auth needs a non-empty user and password")
    expected_user = user.encode("utf-8")
    expected_password = password.encode("utf-8")

    def check(environ: Environ) -> bool:
        header = environ.get("HTTP_AUTHORIZATION", "")
        if not header.lower().startswith("basic "):
            return False
        try:
            raw = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        got_user, _, got_password = raw.partition(b":")
        # both compared, so the time taken does not tell which one was wrong
        ok_user = hmac.compare_digest(got_user, expected_user)
        ok_password = hmac.compare_digest(got_password, expected_password)
        return ok_user and ok_password

    check.realm = realm  # type: ignore[attr-defined]
    return check


class _Refused(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def h(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def _pretty(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _when(ms: Any) -> str:
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return ""
    if ms <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000.0)) + ".%03d UTC" % (ms % 1000)


class Dashboard:
    """The dashboard as a WSGI application.

    ``connection`` is a Redis URL or a ``redis.Redis``; ``queues`` the queue names to
    show (default: every queue found under ``prefix`` by a SCAN for BullMQ's ``meta``
    and ``id`` keys, refreshed every ``discover_every_s`` seconds, plus ``known_queues``,
    e.g. the YAML's, which show even before they have keys). ``actions`` enables the
    buttons that change queues and jobs. ``auth`` is called with the WSGI environ of
    every request and must return true to let it in (see :func:`basic_auth`); without
    it anyone who reaches the address may look (and act, with ``actions=True``).
    """

    def __init__(self, connection: Any = "redis://localhost:6379/0", prefix: str = "bull",
                 queues: Optional[Sequence[str]] = None, actions: bool = False,
                 auth: Optional[Callable[[Environ], bool]] = None, page_size: int = 20,
                 title: str = "echomq", discover_every_s: float = 10.0,
                 known_queues: Sequence[str] = (), sample_every_s: float = SAMPLE_EVERY_S) -> None:
        from ..connection import make_client
        from ..keys import validate_prefix, validate_queue_name

        if not isinstance(page_size, int) or isinstance(page_size, bool) or not 1 <= page_size <= 500:
            raise ValueError(f"page_size must be an integer from 1 to 500, got {page_size!r}")
        if auth is not None and not callable(auth):
            raise TypeError(f"auth must be a callable taking the WSGI environ, got {auth!r}")
        self.prefix = validate_prefix(prefix)
        self.client = make_client(connection)
        self.fixed_queues = [validate_queue_name(q) for q in queues] if queues is not None else None
        self.known_queues = [validate_queue_name(q) for q in known_queues]
        self.actions = bool(actions)
        self.auth = auth
        self.page_size = page_size
        self.title = title
        self.discover_every_s = discover_every_s
        self.sample_every_s = sample_every_s
        self._queues: Dict[str, Any] = {}
        self._known: List[str] = []
        self._known_at = 0.0
        self._samples: Dict[str, Deque[Tuple[float, int, int]]] = {}
        self._lock = threading.Lock()

    # -- queues ---------------------------------------------------------------------------
    def queue_names(self) -> List[str]:
        if self.fixed_queues is not None:
            return list(self.fixed_queues)
        now = time.monotonic()
        if self._known and now - self._known_at < self.discover_every_s:
            return list(self._known)
        found = set(self.known_queues)
        head = self.prefix + ":"
        for suffix in (":meta", ":id"):
            for key in self.client.scan_iter(match=_glob_escape(head) + "*" + suffix, count=500):
                name = key[len(head):-len(suffix)]
                if name and ":" not in name:
                    found.add(name)
        self._known = sorted(found)
        self._known_at = now
        return list(self._known)

    def queue(self, name: str) -> Any:
        if name not in self.queue_names():
            raise _Refused("404 Not Found", f"no queue named {name!r} under prefix {self.prefix!r}")
        q = self._queues.get(name)
        if q is None:
            from ..queue import Queue

            q = Queue(name, connection=self.client, prefix=self.prefix)
            self._queues[name] = q
        return q

    def close(self) -> None:
        for q in self._queues.values():
            q.close()
        self._queues.clear()

    # -- reads ----------------------------------------------------------------------------
    def counts(self, q: Any) -> Dict[str, int]:
        counts = q.get_job_counts(*STATES)
        self._sample(q.name, counts)
        return counts

    def _sample(self, name: str, counts: Dict[str, int]) -> None:
        now = time.time()
        with self._lock:
            ring = self._samples.setdefault(name, collections.deque(maxlen=SAMPLES_KEPT))
            if ring and now - ring[-1][0] < self.sample_every_s:
                return
            ring.append((now, counts.get("completed", 0), counts.get("failed", 0)))

    def throughput(self, q: Any) -> Dict[str, Any]:
        """Per-minute completed/failed counts from BullMQ's metrics keys when a worker
        records them, else rates from the counts this dashboard sampled."""
        getter = getattr(q, "get_metrics", None)
        series: Dict[str, List[float]] = {}
        for kind in ("completed", "failed"):
            if getter is not None:
                m = getter(kind, 0, 59)
                data = m["data"] if isinstance(m, dict) else getattr(m, "data", [])
            else:
                data = self.client.lrange(f"{q.keys.queue_key}:metrics:{kind}:data", 0, 59)
            series[kind] = [_num(x) for x in reversed(data)]
        if any(series.values()):
            return {"source": "metrics", "unit": "jobs/min", **series}
        with self._lock:
            ring = list(self._samples.get(q.name, ()))
        completed, failed = [], []
        for (t0, c0, f0), (t1, c1, f1) in zip(ring, ring[1:]):
            span = max(t1 - t0, 1e-3)
            completed.append(round(max(c1 - c0, 0) / span, 2))
            failed.append(round(max(f1 - f0, 0) / span, 2))
        return {"source": "samples", "unit": "jobs/s", "completed": completed, "failed": failed}

    def schedulers(self, q: Any) -> List[Dict[str, Any]]:
        getter = getattr(q, "get_job_schedulers", None)
        if getter is not None:
            return [s.as_dict() if hasattr(s, "as_dict") else dict(s) for s in getter(0, 49, asc=True)]
        key = q.keys.queue_key + ":repeat"
        out = []
        for sid, score in self.client.zrange(key, 0, 49, withscores=True):
            fields = self.client.hgetall(f"{key}:{sid}")
            entry: Dict[str, Any] = {"id": sid, "next": int(score)}
            for f in ("name", "pattern", "every", "tz", "limit", "ic", "endDate"):
                if f in fields:
                    entry[f] = fields[f]
            out.append(entry)
        return out

    def dependencies(self, q: Any, job: Any) -> Dict[str, List[str]]:
        getter = getattr(job, "get_dependencies", None)
        if getter is not None:
            deps = getter()
            if isinstance(deps, dict):
                return {k: list(v) if not isinstance(v, dict) else list(v.keys()) for k, v in deps.items()}
        base = q.keys.job(job.id)
        pipe = self.client.pipeline(transaction=False)
        pipe.smembers(base + ":dependencies")
        pipe.hkeys(base + ":processed")
        pipe.hkeys(base + ":failed")
        pipe.zrange(base + ":unsuccessful", 0, -1)
        unprocessed, processed, failed, ignored = pipe.execute()
        return {"unprocessed": sorted(unprocessed), "processed": sorted(processed),
                "failed": sorted(failed), "ignored": sorted(ignored)}

    # -- WSGI -------------------------------------------------------------------------------
    def __call__(self, environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        nonce = secrets.token_urlsafe(16)
        cookie = _cookie(environ, CSRF_COOKIE)
        set_cookie = None
        if not cookie or len(cookie) < 32:
            cookie = secrets.token_urlsafe(32)
            set_cookie = cookie
        req = _Request(environ, nonce, cookie)
        try:
            if self.auth is not None and not self.auth(environ):
                realm = getattr(self.auth, "realm", None)
                extra = [("WWW-Authenticate", f'Basic realm="{realm}"')] if realm else []
                raise _RefusedWith("401 Unauthorized", "sign in to see this dashboard", extra)
            status, headers, body = self.route(req)
        except _RefusedWith as exc:
            status, headers, body = self.error_page(req, exc.status, exc.message)
            headers = headers + exc.headers
        except _Refused as exc:
            status, headers, body = self.error_page(req, exc.status, exc.message)
        if set_cookie:
            path = environ.get("SCRIPT_NAME", "") or "/"
            secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
            headers.append(("Set-Cookie", f"{CSRF_COOKIE}={set_cookie}; Path={path}; HttpOnly; "
                                          f"SameSite=Strict{secure}"))
        headers += [
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            ("X-Frame-Options", "DENY"),
            ("Referrer-Policy", "same-origin"),
            ("Content-Security-Policy",
             f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
             "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
             "frame-ancestors 'none'"),
        ]
        start_response(status, headers)
        return [body] if environ.get("REQUEST_METHOD", "GET") != "HEAD" else [b""]

    def route(self, req: "_Request") -> Response:
        path = req.path
        if req.method == "POST":
            if path != "/action":
                raise _Refused("405 Method Not Allowed", "only /action takes a POST")
            return self.do_action(req)
        if req.method not in ("GET", "HEAD"):
            raise _Refused("405 Method Not Allowed", f"method {req.method} is not allowed here")
        if path in ("", "/"):
            return self.page_overview(req)
        if path == "/queue":
            return self.page_queue(req)
        if path == "/job":
            return self.page_job(req)
        if path == "/confirm":
            return self.page_confirm(req)
        if path == "/api/counts":
            return self.api_counts(req)
        raise _Refused("404 Not Found", f"no page at {path!r}")

    # -- pages ----------------------------------------------------------------------------
    def page_overview(self, req: "_Request") -> Response:
        rows = []
        for name in self.queue_names():
            q = self.queue(name)
            counts = self.counts(q)
            paused = q.is_paused()
            workers = len(q.get_workers())
            cells = "".join(
                f'<td class="n"><a href="{h(req.url("/queue", name=name, state=s))}" '
                f'data-count="{h(s)}">{counts.get(s, 0)}</a></td>' for s in STATES)
            rows.append(
                f'<tr data-queue="{h(name)}"><td><a href="{h(req.url("/queue", name=name))}">{h(name)}</a>'
                f'{" <span class=tag>paused</span>" if paused else ""}</td>{cells}'
                f'<td class="n">{workers}</td>'
                f'<td>{_chart(self.throughput(q), 160, 32)}</td></tr>')
        head = "".join(f"<th>{h(s)}</th>" for s in STATES)
        body = (f"<h1>Queues <small>prefix {h(self.prefix)}</small></h1>"
                + ("<p>No queue found under this prefix.</p>" if not rows else
                   f'<table id="queues"><tr><th>queue</th>{head}<th>workers</th><th>throughput</th></tr>'
                   + "".join(rows) + "</table>"))
        return self.page(req, "Queues", body)

    def page_queue(self, req: "_Request") -> Response:
        name = req.arg("name")
        q = self.queue(name)
        state = req.arg("state", "waiting")
        if state not in STATES:
            raise _Refused("400 Bad Request", f"unknown state {state!r}; use one of {', '.join(STATES)}")
        wanted = req.arg("id", "").strip()
        notice = ""
        if wanted:
            if q.get_job(wanted) is not None:
                return _redirect(req.url("/job", queue=name, id=wanted))
            notice = f'<p class="notice">No job with id {h(wanted)} in {h(name)}.</p>'
        page = _int_arg(req.arg("page", "1"), "page", 1)
        counts = self.counts(q)
        total = counts.get(state, 0)
        start = (page - 1) * self.page_size
        jobs = q.get_jobs(state, start, start + self.page_size - 1)
        paused = q.is_paused()
        tabs = "".join(
            f'<a class="tab{" on" if s == state else ""}" href="{h(req.url("/queue", name=name, state=s))}">'
            f'{h(s)} <b data-count="{h(s)}">{counts.get(s, 0)}</b></a>' for s in STATES)
        rows = "".join(
            f'<tr><td><a href="{h(req.url("/job", queue=name, id=j.id))}">{h(j.id)}</a></td>'
            f'<td>{h(j.name)}</td><td>{h(_when(j.timestamp))}</td><td>{h(j.attempts_made)}</td>'
            f'<td class="clip">{h(_short(j.failed_reason if state == "failed" else j.data))}</td></tr>'
            for j in jobs)
        pages = max(1, -(-total // self.page_size))
        nav = []
        if page > 1:
            nav.append(f'<a rel="prev" href="{h(req.url("/queue", name=name, state=state, page=page - 1))}">newer</a>')
        nav.append(f"page {page} of {pages}")
        if page < pages:
            nav.append(f'<a rel="next" href="{h(req.url("/queue", name=name, state=state, page=page + 1))}">older</a>')
        actions = ""
        if self.actions:
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
        schedulers = self.schedulers(q)
        sched_html = ""
        if schedulers:
            sched_html = "<h2>Job schedulers</h2><table><tr><th>id</th><th>next run</th><th>details</th></tr>" + "".join(
                f'<tr><td>{h(s.get("id") or s.get("key"))}</td><td>{h(_when(s.get("next")))}</td>'
                f'<td><code>{h(_short({k: v for k, v in s.items() if k not in ("id", "key", "next")}, 200))}</code></td></tr>'
                for s in schedulers) + "</table>"
        workers = q.get_workers()
        workers_html = "<h2>Workers</h2>" + ("<p>No worker connected.</p>" if not workers else
            "<table id=\"workers\"><tr><th>connection name</th><th>address</th><th>age (s)</th><th>idle (s)</th></tr>"
            + "".join(f'<tr><td>{h(w.get("rawname"))}</td><td>{h(w.get("addr"))}</td>'
                      f'<td class="n">{h(w.get("age"))}</td><td class="n">{h(w.get("idle"))}</td></tr>'
                      for w in workers) + "</table>")
        body = (f'<h1 data-queue="{h(name)}">{h(name)}{" <span class=tag>paused</span>" if paused else ""}</h1>'
                f"{req.flash()}{notice}{actions}"
                f'<div class="chart">{_chart(self.throughput(q), 640, 120, axis=True)}</div>'
                f'<form method="get" action="{h(req.url("/queue"))}" class="search">'
                f'<input type="hidden" name="name" value="{h(name)}">'
                f'<input name="id" placeholder="job id" aria-label="job id"> <button>Find</button></form>'
                f'<nav class="tabs">{tabs}</nav>'
                f'<table id="jobs" data-state="{h(state)}"><tr><th>id</th><th>name</th><th>added</th>'
                f'<th>attempts</th><th>{"failed reason" if state == "failed" else "data"}</th></tr>{rows}</table>'
                f'<p class="pager">{" | ".join(nav)}</p>{sched_html}{workers_html}')
        return self.page(req, name, body, poll=name)

    def page_job(self, req: "_Request") -> Response:
        name = req.arg("queue")
        q = self.queue(name)
        job_id = req.arg("id")
        job = q.get_job(job_id)
        if job is None:
            raise _Refused("404 Not Found", f"no job with id {job_id!r} in queue {name!r}")
        state = q.get_job_state(job_id)
        logs = q.get_job_logs(job_id, 0, 199)
        deps = self.dependencies(q, job)
        facts = [("state", state), ("name", job.name), ("added", _when(job.timestamp)),
                 ("processed", _when(job.processed_on)), ("finished", _when(job.finished_on)),
                 ("attempts made", job.attempts_made), ("attempts started", job.attempts_started),
                 ("delay (ms)", job.delay), ("priority", job.priority), ("processed by", job.processed_by or "")]
        facts_html = "".join(f"<tr><th>{h(k)}</th><td>{h(v)}</td></tr>" for k, v in facts)
        parent = ""
        if job.parent_key:
            parent = f"<tr><th>parent</th><td>{self._job_link(req, job.parent_key)}</td></tr>"
        sections = [
            ("data", f'<pre id="data">{h(_pretty(job.data))}</pre>'),
            ("options", f'<pre id="opts">{h(_pretty(job.opts))}</pre>'),
            ("progress", f'<pre id="progress">{h(_pretty(job.progress))}</pre>'),
        ]
        if job.returnvalue is not None or state == "completed":
            sections.append(("return value", f'<pre id="returnvalue">{h(_pretty(job.returnvalue))}</pre>'))
        if job.failed_reason:
            sections.append(("failed reason", f'<pre id="failedReason">{h(job.failed_reason)}</pre>'))
        if job.stacktrace:
            sections.append(("stack trace", "".join(f'<pre class="stack">{h(s)}</pre>' for s in job.stacktrace)))
        if job.decode_error:
            sections.append(("decoding problem", f"<pre>{h(job.decode_error)}</pre>"))
        sections.append((f"logs ({logs['count']})", '<pre id="logs">' + h("\n".join(logs["logs"])) + "</pre>"))
        if any(deps.values()):
            items = "".join(f"<li>{h(kind)}: {self._job_link(req, key)}</li>"
                            for kind, keys in deps.items() for key in keys)
            sections.append(("children", f'<ul id="children">{items}</ul>'))
        actions = ""
        if self.actions:
            buttons = []
            if state in ("failed", "completed"):
                buttons.append(("retry", "Retry"))
            if state == "delayed":
                buttons.append(("promote", "Promote"))
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
        return self.page(req, f"job {job_id}", body)

    def _job_link(self, req: "_Request", key: str) -> str:
        head = self.prefix + ":"
        if key.startswith(head) and ":" in key[len(head):]:
            queue, _, job_id = key[len(head):].rpartition(":")
            return f'<a href="{h(req.url("/job", queue=queue, id=job_id))}">{h(key)}</a>'
        return h(key)

    def page_confirm(self, req: "_Request") -> Response:
        if not self.actions:
            raise _Refused("403 Forbidden", "actions are disabled on this dashboard (read-only)")
        name = req.arg("queue")
        self.queue(name)
        action = req.arg("action")
        job_id = req.arg("job", "")
        state = req.arg("state", "")
        what = _describe(action, name, job_id, state)
        fields = {"queue": name, "action": action, "job": job_id, "state": state, "csrf": req.cookie}
        hidden = "".join(f'<input type="hidden" name="{h(k)}" value="{h(v)}">' for k, v in fields.items() if v)
        grace = ""
        if action == "clean":
            grace = ('<p><label>only jobs older than <input name="grace" value="0" size="8" '
                     'inputmode="numeric"> ms</label></p>')
        back = req.url("/job", queue=name, id=job_id) if job_id else req.url("/queue", name=name)
        body = (f"<h1>Confirm</h1><p id=\"confirm-text\">{h(what)}?</p>"
                f'<form method="post" action="{h(req.url("/action"))}" id="confirm-form">{hidden}{grace}'
                f'<button id="confirm">Yes, {h(action)}</button> <a href="{h(back)}">Cancel</a></form>')
        return self.page(req, "Confirm", body)

    def do_action(self, req: "_Request") -> Response:
        from ..errors import EchoMQError

        if not self.actions:
            raise _Refused("403 Forbidden", "actions are disabled on this dashboard (read-only)")
        form = req.form()
        token = form.get("csrf", "")
        if not token or not req.had_cookie or not hmac.compare_digest(token, req.cookie):
            raise _Refused("403 Forbidden", "the form's CSRF token is missing or does not match this "
                                            "browser's cookie; reload the page and try again")
        origin = req.environ.get("HTTP_ORIGIN")
        hosts = {req.environ.get("HTTP_HOST", ""), req.environ.get("HTTP_X_FORWARDED_HOST", "")} - {""}
        if origin and origin.split("://", 1)[-1] not in hosts:
            raise _Refused("403 Forbidden", f"cross-origin request from {origin!r} refused")
        name = form.get("queue", "")
        q = self.queue(name)
        action = form.get("action", "")
        job_id = form.get("job", "")
        try:
            done, back = self._act(req, q, action, job_id, form)
        except (EchoMQError, ValueError) as exc:
            raise _Refused("409 Conflict", f"{_describe(action, name, job_id, form.get('state', ''))} failed: {exc}")
        return _redirect(back + "&" + urlencode({"done": done}))

    def _act(self, req: "_Request", q: Any, action: str, job_id: str, form: Dict[str, str]) -> Tuple[str, str]:
        name = q.name
        to_queue = req.url("/queue", name=name)
        if action in ("retry", "promote", "remove"):
            job = q.get_job(job_id) if job_id else None
            if job is None:
                raise ValueError(f"no job with id {job_id!r}")
            if action == "retry":
                job.retry(form.get("state") if form.get("state") in ("completed", "failed") else "failed")
                return f"job {job_id} retried", req.url("/job", queue=name, id=job_id)
            if action == "promote":
                job.promote()
                return f"job {job_id} promoted", req.url("/job", queue=name, id=job_id)
            if q.remove_job(job_id) != 1:
                raise ValueError(f"job {job_id} is locked by a worker; try again when it has finished")
            return f"job {job_id} removed", to_queue
        if action == "pause":
            q.pause()
            return f"queue {name} paused", to_queue
        if action == "resume":
            q.resume()
            return f"queue {name} resumed", to_queue
        if action == "clean":
            state = form.get("state", "")
            if state not in CLEAN_STATES:
                raise ValueError(f"cannot clean state {state!r}; use one of {', '.join(CLEAN_STATES)}")
            grace = _int_arg(form.get("grace", "0") or "0", "grace", 0)
            removed = q.clean(grace, 0, state)
            return f"{len(removed)} {state} job(s) removed", req.url("/queue", name=name, state=state)
        if action == "retry-all":
            q.retry_jobs(state="failed")
            return "failed jobs retried", req.url("/queue", name=name, state="failed")
        if action == "promote-all":
            q.promote_jobs()
            return "delayed jobs promoted", req.url("/queue", name=name, state="delayed")
        raise ValueError(f"unknown action {action!r}")

    def api_counts(self, req: "_Request") -> Response:
        q = self.queue(req.arg("queue"))
        payload = {"queue": q.name, "counts": self.counts(q), "paused": q.is_paused(),
                   "throughput": self.throughput(q)}
        return "200 OK", [("Content-Type", "application/json")], json.dumps(payload).encode()

    # -- layout ---------------------------------------------------------------------------
    def error_page(self, req: "_Request", status: str, message: str) -> Response:
        return self.page(req, status, f'<h1>{h(status)}</h1><p id="error">{h(message)}</p>', status=status)

    def page(self, req: "_Request", title: str, body: str, status: str = "200 OK",
             poll: Optional[str] = None) -> Response:
        mode = "actions enabled" if self.actions else "read-only"
        poll_attr = f' data-poll="{h(req.url("/api/counts", queue=poll))}"' if poll else ""
        text = (
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{h(title)} - {h(self.title)}</title><style nonce=\"{req.nonce}\">{_CSS}</style></head>"
            f'<body{poll_attr}><header><a href="{h(req.url("/"))}">{h(self.title)}</a>'
            f'<span class="mode">{mode}</span></header><main>{body}</main>'
            f'<script nonce="{req.nonce}">{_JS}</script></body></html>')
        return status, [("Content-Type", "text/html; charset=utf-8")], text.encode("utf-8")


class _RefusedWith(_Refused):
    def __init__(self, status: str, message: str, headers: List[Tuple[str, str]]) -> None:
        super().__init__(status, message)
        self.headers = headers


class _Request:
    def __init__(self, environ: Environ, nonce: str, cookie: str) -> None:
        self.environ = environ
        self.nonce = nonce
        self.cookie = cookie
        self.had_cookie = _cookie(environ, CSRF_COOKIE) == cookie
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        raw = environ.get("PATH_INFO", "") or "/"
        try:
            raw = raw.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
        self.path = raw.rstrip("/") or "/"
        self.base = environ.get("SCRIPT_NAME", "").rstrip("/")
        self.query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).items()}

    def arg(self, key: str, default: Optional[str] = None) -> str:
        value = self.query.get(key, default)
        if value is None:
            raise _Refused("400 Bad Request", f"the address needs the parameter {key!r}")
        return value

    def url(self, path: str, **params: Any) -> str:
        url = self.base + path
        if params:
            url += "?" + urlencode(params)
        return url

    def form(self) -> Dict[str, str]:
        try:
            length = int(self.environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_FORM_BYTES:
            raise _Refused("413 Payload Too Large", f"form larger than {MAX_FORM_BYTES} bytes")
        raw = self.environ["wsgi.input"].read(length) if length > 0 else b""
        parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in parsed.items()}

    def flash(self) -> str:
        done = self.query.get("done")
        return f'<p class="flash" id="flash">{h(done)}</p>' if done else ""


def _cookie(environ: Environ, name: str) -> str:
    for part in environ.get("HTTP_COOKIE", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return ""


def _redirect(location: str) -> Response:
    return "303 See Other", [("Location", location), ("Content-Type", "text/plain")], b""


def _int_arg(text: str, label: str, low: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise _Refused("400 Bad Request", f"{label} must be an integer, got {text!r}") from None
    if value < low:
        raise _Refused("400 Bad Request", f"{label} must be >= {low}, got {value}")
    return value


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _describe(action: str, queue: str, job_id: str, state: str) -> str:
    texts = {
        "retry": f"Retry job {job_id} of queue {queue}",
        "promote": f"Promote delayed job {job_id} of queue {queue} to run now",
        "remove": f"Remove job {job_id} of queue {queue} (and its children)",
        "pause": f"Pause queue {queue} for every worker",
        "resume": f"Resume queue {queue}",
        "clean": f"Delete the {state} jobs of queue {queue}",
        "retry-all": f"Retry every failed job of queue {queue}",
        "promote-all": f"Promote every delayed job of queue {queue}",
    }
    if action not in texts:
        raise _Refused("400 Bad Request", f"unknown action {action!r}; use one of {', '.join(texts)}")
    if action in ("retry", "promote", "remove") and not job_id:
        raise _Refused("400 Bad Request", f"action {action!r} needs a job id")
    return texts[action]


def _chart(t: Dict[str, Any], width: int, height: int, axis: bool = False) -> str:
    """An inline SVG line chart of completed (and failed) per interval; the page's
    script redraws it from ``/api/counts`` while the page is open."""
    payload = h(json.dumps(t))
    peak = max([1.0] + list(t["completed"]) + list(t["failed"]))
    lines = []
    for kind in ("completed", "failed"):
        values = list(t[kind])
        if len(values) == 1:
            values = values * 2  # one minute recorded: a flat line at its value
        if len(values) < 2:
            continue
        step = width / (len(values) - 1)
        pts = " ".join(f"{i * step:.1f},{height - 2 - v / peak * (height - 4):.1f}" for i, v in enumerate(values))
        lines.append(f'<polyline class="{kind}" points="{pts}"/>')
    if not lines:
        lines.append(f'<text x="4" y="{height // 2}" class="empty">no data yet</text>')
    label = ""
    if axis:
        label = (f'<figcaption>completed (green) and failed (red), {h(t["unit"])}, peak '
                 f'<span class="peak">{peak:g}</span>; from '
                 f'{"BullMQ metrics" if t["source"] == "metrics" else "count samples of this page"}</figcaption>')
    return (f'<figure class="tp"><svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'data-series="{payload}" role="img" aria-label="throughput">{"".join(lines)}</svg>{label}</figure>')


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#234;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#fff;font-weight:bold;text-decoration:none}.mode{opacity:.7;font-size:12px}
main{padding:8px 16px}table{border-collapse:collapse;margin:8px 0;background:#fff}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}td.n{text-align:right}
.clip{max-width:420px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;font-family:monospace}
pre{background:#fff;border:1px solid #ddd;padding:6px;white-space:pre-wrap;word-break:break-all;max-height:360px;overflow:auto}
.tabs{display:flex;flex-wrap:wrap;gap:4px;margin:8px 0}.tab{padding:3px 8px;border:1px solid #ccd;border-radius:3px;text-decoration:none}
.tab.on{background:#234;color:#fff}.tag{background:#c60;color:#fff;border-radius:3px;padding:0 4px;font-size:12px}
.button{display:inline-block;padding:3px 10px;border:1px solid #234;border-radius:3px;text-decoration:none;background:#fff}
.flash{background:#dfd;padding:4px 8px}.notice{background:#ffd;padding:4px 8px}
figure.tp{margin:0}svg polyline{fill:none;stroke-width:1.5}svg .completed{stroke:#283}svg .failed{stroke:#c33}svg .empty{fill:#999;font-size:11px}
figcaption{font-size:12px;color:#555}h1 small{font-size:13px;color:#666;font-weight:normal}
"""

_JS = """
(function(){
  var url=document.body.getAttribute('data-poll');
  function draw(svg,t){
    var w=+svg.getAttribute('width'),hh=+svg.getAttribute('height');
    var peak=Math.max.apply(null,[1].concat(t.completed,t.failed));
    while(svg.firstChild){svg.removeChild(svg.firstChild);}
    ['completed','failed'].forEach(function(k){
      var v=t[k];if(v.length<2){return;}
      var pts=v.map(function(x,i){return (i*w/(v.length-1)).toFixed(1)+','+(hh-2-x/peak*(hh-4)).toFixed(1);});
      var p=document.createElementNS('http://www.w3.org/2000/svg','polyline');
      p.setAttribute('class',k);p.setAttribute('points',pts.join(' '));svg.appendChild(p);
    });
    var pk=svg.parentNode.querySelector('.peak');if(pk){pk.textContent=String(peak);}
  }
  if(!url){return;}
  function tick(){
    var x=new XMLHttpRequest();x.open('GET',url);
    x.onload=function(){
      if(x.status!==200){return;}
      var d=JSON.parse(x.responseText);
      Array.prototype.forEach.call(document.querySelectorAll('[data-count]'),function(el){
        var s=el.getAttribute('data-count');if(s in d.counts){el.textContent=String(d.counts[s]);}
      });
      var svg=document.querySelector('.chart svg');if(svg){draw(svg,d.throughput);}
    };
    x.send();
  }
  setInterval(tick,5000);
})();
"""


def serve(app: Callable[..., Any], host: str = "127.0.0.1", port: int = 8765, log: Any = None) -> Any:
    """A gevent WSGI server for the dashboard (started; call ``.serve_forever()`` or
    ``.stop()``). Binds 127.0.0.1 unless told otherwise."""
    from gevent.pywsgi import WSGIServer

    server = WSGIServer((host, port), app, log=log)
    server.start()
    return server


def parse_bind(text: str) -> Tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (127.0.0.1) or ``PORT`` -> ``(host, port)``; ``[::1]:80`` too."""
    host, sep, port = str(text).rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--bind wants HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--bind: port {number} is out of range")
    return host, number


def auth_from_env(environ: Optional[Dict[str, str]] = None) -> Optional[Callable[[Environ], bool]]:
    """Basic auth from ``ECHOMQ_DASHBOARD_USER``/``ECHOMQ_DASHBOARD_PASSWORD`` when both are set."""
    import os

    env = os.environ if environ is None else environ
    user, password = env.get("ECHOMQ_DASHBOARD_USER"), env.get("ECHOMQ_DASHBOARD_PASSWORD")
    if not user and not password:
        return None
    if not (user and password):
        raise ValueError("set both ECHOMQ_DASHBOARD_USER and ECHOMQ_DASHBOARD_PASSWORD, or neither")
    return basic_auth(user, password)

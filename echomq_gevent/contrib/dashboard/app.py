"""The dashboard as a WSGI application: its options, the routing of a request to a page
or an action, and the headers of every answer.

Called by the WSGI server on the greenlet (or thread) that serves the request; the
pages are in :mod:`.pages`, the actions in :mod:`.actions`, the reads in :mod:`.reads`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence
from urllib.parse import urlencode

from . import pages
from .actions import perform
from .reads import SAMPLE_EVERY_S, Reads
from .render import h, layout
from .security import authenticate, check_post, headers, open_request
from .web import Environ, Refused, Request, Response, redirect

#: GET pages by path below the mount point.
_PAGES: Dict[str, Callable[[Any, Request], Response]] = {
    "/": pages.overview,
    "/queue": pages.queue,
    "/job": pages.job,
    "/confirm": pages.confirm,
    "/api/counts": pages.api_counts,
}


class Dashboard:
    """The dashboard as a WSGI application.

    ``connection`` is a Redis URL or a ``redis.Redis``; ``queues`` the queue names to
    show (default: every queue found under ``prefix`` by a SCAN for BullMQ's ``meta``
    and ``id`` keys, refreshed every ``discover_every_s`` seconds, plus ``known_queues``,
    e.g. the YAML's, which show even before they have keys). ``actions`` enables the
    buttons that change queues and jobs. ``auth`` is called with the WSGI environ of
    every request and must return true to let it in (see
    :func:`~echomq_gevent.contrib.dashboard.basic_auth`); without it anyone who reaches
    the address may look (and act, with ``actions=True``). ``processes``, when given, is
    called for each overview page and returns the state of each supervisor of worker
    processes to show (what :func:`echomq_gevent.host.process_state.read_states` reads;
    ``echomq-gevent -c FILE dashboard`` passes the file's). ``pools``: the pools to show
    with their budget and what each queue uses (what
    :func:`echomq_gevent.host.pools.describe_pools` gives; the command passes the file's).
    """

    def __init__(self, connection: Any = "redis://localhost:6379/0", prefix: str = "bull",
                 queues: Optional[Sequence[str]] = None, actions: bool = False,
                 auth: Optional[Callable[[Environ], bool]] = None, page_size: int = 20,
                 title: str = "echomq", discover_every_s: float = 10.0,
                 known_queues: Sequence[str] = (), sample_every_s: float = SAMPLE_EVERY_S,
                 processes: Optional[Callable[[], Sequence[Dict[str, Any]]]] = None,
                 pools: Sequence[Dict[str, Any]] = ()) -> None:
        from ...connection.clients import make_client
        from ...protocol.keys import validate_prefix, validate_queue_name

        if not isinstance(page_size, int) or isinstance(page_size, bool) or not 1 <= page_size <= 500:
            raise ValueError(f"page_size must be an integer from 1 to 500, got {page_size!r}")
        if auth is not None and not callable(auth):
            raise TypeError(f"auth must be a callable taking the WSGI environ, got {auth!r}")
        if processes is not None and not callable(processes):
            raise TypeError(f"processes must be a callable returning the supervisors' states, got {processes!r}")
        self.processes = processes
        self.pools = list(pools)
        self.prefix = validate_prefix(prefix)
        self.client = make_client(connection)
        self.actions = bool(actions)
        self.auth = auth
        self.page_size = page_size
        self.title = title
        self.reads = Reads(self.client, self.prefix,
                           [validate_queue_name(q) for q in queues] if queues is not None else None,
                           [validate_queue_name(q) for q in known_queues], discover_every_s, sample_every_s)

    # -- what the pages read (kept here for callers of the dashboard object) --------------
    def queue_names(self) -> List[str]:
        """The queues the dashboard shows."""
        return self.reads.queue_names()

    def queue(self, name: str) -> Any:
        """The :class:`~echomq_gevent.queue.Queue` of a queue the dashboard shows."""
        return self.reads.queue(name)

    def counts(self, q: Any) -> Dict[str, int]:
        return self.reads.counts(q)

    def throughput(self, q: Any) -> Dict[str, Any]:
        """The chart's series (see :meth:`~echomq_gevent.contrib.dashboard.reads.Reads.throughput`)."""
        return self.reads.throughput(q)

    def close(self) -> None:
        """Close the queues the dashboard opened."""
        self.reads.close()

    # -- WSGI -----------------------------------------------------------------------------
    def __call__(self, environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        req, new_token = open_request(environ)
        try:
            authenticate(self.auth, environ)
            status, head, body = self.route(req)
        except Refused as exc:
            status, head, body = self.error_page(req, exc.status, exc.message)
            head = head + exc.headers
        head = head + [("Content-Length", str(len(body)))] + headers(req, new_token)
        start_response(status, head)
        return [body] if environ.get("REQUEST_METHOD", "GET") != "HEAD" else [b""]

    def route(self, req: Request) -> Response:
        if req.method == "POST":
            if req.path != "/action":
                raise Refused("405 Method Not Allowed", "only /action takes a POST")
            return self.do_action(req)
        if req.method not in ("GET", "HEAD"):
            raise Refused("405 Method Not Allowed", f"method {req.method} is not allowed here")
        page = _PAGES.get(req.path)
        if page is None:
            raise Refused("404 Not Found", f"no page at {req.path!r}")
        return page(self, req)

    def do_action(self, req: Request) -> Response:
        """A confirmed action: refused unless actions are enabled and the form carries the
        visitor's CSRF token from this origin; then done, and on to the page it concerns."""
        if not self.actions:
            raise Refused("403 Forbidden", "actions are disabled on this dashboard (read-only)")
        form = req.form()
        check_post(req, form)
        q = self.reads.queue(form.get("queue", ""))
        done, back = perform(req, q, form)
        return redirect(back + "&" + urlencode({"done": done}))

    # -- layout ---------------------------------------------------------------------------
    def error_page(self, req: Request, status: str, message: str) -> Response:
        return self.page(req, status, f'<h1>{h(status)}</h1><p id="error">{h(message)}</p>', status=status)

    def page(self, req: Request, title: str, body: str, status: str = "200 OK",
             poll: Optional[str] = None) -> Response:
        """A whole page around ``body``; ``poll`` names the queue whose counts its script
        refreshes."""
        text = layout(req.url("/"), self.title, not self.actions, req.nonce, title, body,
                      req.url("/api/counts", queue=poll) if poll else None)
        return status, [("Content-Type", "text/html; charset=utf-8")], text


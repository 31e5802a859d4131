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

The modules, one concern each (this package re-exports the public names):

- :mod:`.app`: :class:`Dashboard`, the WSGI application (options, routing, the headers
  of every answer);
- :mod:`.reads`: what the pages read from Redis (queue discovery, counts, the throughput
  series, schedulers, a job's children);
- :mod:`.pages`: the HTML pages and the JSON the open page polls;
- :mod:`.actions`: the confirmed actions (retry, promote, remove, pause, clean...);
- :mod:`.render`: escaping, formatting, the chart and the page layout (its stylesheet and
  script are ``static/dashboard.css`` and ``static/dashboard.js``);
- :mod:`.security`: authentication, the CSRF token, the same-origin check, the Content
  Security Policy;
- :mod:`.web`: the request object and the refusals (HTTP errors);
- :mod:`.server`: the standalone server of ``echomq-gevent dashboard``.
"""
from __future__ import annotations

from .app import Dashboard
from .reads import STATES
from .security import auth_from_env, basic_auth
from .server import parse_bind, serve

__all__ = ["Dashboard", "basic_auth", "serve", "STATES", "parse_bind", "auth_from_env"]

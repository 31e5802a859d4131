"""Integrations with the servers legacy WSGI apps run on.

- :mod:`echomq_gevent.contrib.gunicorn`: ``install(globals(), config=...)`` in a gunicorn
  config file runs the YAML's job workers inside every ``-k gevent`` worker process,
  beside the WSGI app, on the same hub, with a drain on shutdown that loses nothing.
- :mod:`echomq_gevent.contrib.cohost`: the job workers of one gunicorn worker process (a
  :class:`~echomq_gevent.host.runner.Runner` plus gunicorn's timing, heartbeat and reports).
- :mod:`echomq_gevent.contrib.wsgi`: a middleware serving ``/_echomq/live``,
  ``/_echomq/ready`` and ``/_echomq/metrics``, and :func:`~echomq_gevent.contrib.wsgi.get_queue`,
  the one shared ``Queue`` per process that request handlers enqueue with.
- :mod:`echomq_gevent.contrib.state`: what these share per process (settings, the job
  workers, the embedded Redis, the shared queues).
- :mod:`echomq_gevent.contrib.django`, :mod:`echomq_gevent.contrib.flask`,
  :mod:`echomq_gevent.contrib.pyramid`: the framework integrations (settings, enqueue
  after commit, per-job context, commands), on :mod:`echomq_gevent.contrib.frameworks`;
  :mod:`echomq_gevent.contrib.patched` runs a program with gevent patched first.
- :mod:`echomq_gevent.contrib.dashboard`: the web dashboard (a WSGI app; a package, one
  module per concern, its stylesheet and script as package data).
- :mod:`echomq_gevent.contrib.logging`, :mod:`echomq_gevent.contrib.prometheus`,
  :mod:`echomq_gevent.contrib.otel`, :mod:`echomq_gevent.contrib.demo`: the plugins
  shipped with the package, named by module
  in the YAML ``plugins:``; ``demo.yaml`` beside them is the file ``echomq-gevent --demo``
  runs when it is given none.

See ``docs/gunicorn.md``, ``docs/plugins.md`` and ``docs/frameworks.md``.
"""

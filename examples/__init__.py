"""A legacy-style WSGI app whose background jobs run in the same gunicorn processes.

Run it with ``gunicorn -c conf/gunicorn.conf.py`` (see ``docs/gunicorn.md``).
"""

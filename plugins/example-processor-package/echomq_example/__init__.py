"""Example echomq-gevent processor plugin (a template to copy)."""

"""BullMQ v6's protocol: the key layout, job options and their encoding, the clock,
backoff, cron, and the Lua scripts of ``lua/`` with the one class that calls them
(:class:`~echomq_gevent.protocol.scripts.Scripts`).
"""

"""The processor the pool interop tests name in their YAML (importable by module name), and
the runner of a pool over the tenant queues ``<qname>-tenant-*`` they share."""


def echo(job):
    return job.data


def tenant_runner(redis_url, prefix, qname, concurrency, order=None, declared=None):
    """A started-to-be :class:`~echomq_gevent.host.runner.Runner` of one pool over
    ``<qname>-tenant-*`` (run by :func:`echo`, looked for every 0.2 s), with ``declared``
    queue names under ``queues:`` (run by :func:`echo` too)."""
    from echomq_gevent.host.config import parse_config
    from echomq_gevent.host.runner import Runner

    queues = "".join(f'\n  {name}: {{processor: "interop_pool_helpers:echo"}}' for name in declared or ())
    cfg = parse_config(f"""
redis: {{url: "{redis_url}"}}
prefix: {prefix}
entry_points: false
{"queues:" + queues if queues else ""}
pools:
  tenants:
    concurrency: {concurrency}
    queues: ["{qname}-tenant-*"]
    {"order: " + order if order else ""}
    processor: "interop_pool_helpers:echo"
    discover_every: 0.2
""")
    return Runner(cfg, redis_url)

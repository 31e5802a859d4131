"""A Pyramid worker process (pyramid_tm, zope.sqlalchemy) whose ``charge`` processor is
marked atomic, for the ledger's fault tests; patched first, as
``python -m echomq_gevent.contrib.pyramid`` runs it.

    python ledger_pyramid_proc.py DATABASE_URL REDIS_URL PREFIX QUEUE

``charge`` inserts one ``ledger_effects`` row (the job id, a run id) through the job's
``request.dbsession`` and returns the run id and the pid; the ledger row is written in the
same ``request.tm`` transaction, which the job context commits after the processor. With
``LEDGER_KILL_AFTER_COMMIT=1`` the process SIGKILLs itself after that commit and before
the finish. Prints ``ledger worker ready``.
"""
from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402


def main() -> int:
    url, redis_url, prefix, queue = sys.argv[1:5]
    import zope.sqlalchemy
    from pyramid.config import Configurator
    from sqlalchemy import Column, Integer, MetaData, String, Table, engine_from_config
    from sqlalchemy.orm import sessionmaker

    import ledger_after_commit
    from echomq_gevent.contrib.ledger.sqlalchemy import metadata as ledger_metadata
    from echomq_gevent.contrib.pyramid import integration, job_request, processor

    effects = Table("ledger_effects", MetaData(), Column("id", Integer, primary_key=True),
                    Column("job_id", String(255), nullable=False), Column("run", String(64), nullable=False))

    @processor(queue, "charge", atomic=True)
    def charge(job):
        run = uuid.uuid4().hex
        job_request().dbsession.execute(effects.insert().values(job_id=str(job.id), run=run))
        return {"run": run, "pid": os.getpid()}

    def dbsession(request):
        session = request.registry["dbsession_factory"]()
        zope.sqlalchemy.register(session, transaction_manager=request.tm)
        return session

    settings = {"sqlalchemy.url": url, "echomq.redis_url": redis_url, "echomq.prefix": prefix,
                "echomq.entry_points": "false"}
    for key, value in {"concurrency": 1, "lock_duration": 1000, "stalled_interval": 1000, "drain_delay": 0.5,
                       "shutdown_timeout": 5}.items():
        settings[f"echomq.queues.{queue}.{key}"] = str(value)
    with Configurator(settings=settings) as config:
        config.include("pyramid_tm")
        engine = engine_from_config(settings, "sqlalchemy.")
        config.registry["dbsession_factory"] = sessionmaker(bind=engine)
        config.add_request_method(dbsession, "dbsession", reify=True)
        config.include("echomq_gevent.contrib.pyramid")
        registry = config.registry
    config.make_wsgi_app()
    effects.metadata.create_all(engine)
    ledger_metadata.create_all(engine)

    state = integration(registry)
    plugins = list(state.plugins)
    after_commit = ledger_after_commit.from_environment()
    if after_commit is not None:
        plugins.append(after_commit)  # the outermost job context: it exits after request.tm committed
    print("ledger worker ready", flush=True)
    return state.run_worker(plugins=plugins)


if __name__ == "__main__":
    sys.exit(main())

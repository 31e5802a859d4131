"""A Flask worker process (Flask-SQLAlchemy) whose ``charge`` processor is marked atomic,
for the ledger's fault tests; run as ``flask echomq worker`` runs it, patched first.

    python ledger_flask_proc.py DATABASE_URL REDIS_URL PREFIX QUEUE

``charge`` inserts one ``ledger_effects`` row (the job id, a run id) through
``db.session`` and returns the run id and the pid. With ``LEDGER_KILL_AFTER_COMMIT=1``
the process SIGKILLs itself after the ledger committed and before the finish (a job
context that exits after the processor). Prints ``ledger worker ready``.
"""
from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402


def main() -> int:
    url, redis_url, prefix, queue = sys.argv[1:5]
    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy

    from echomq_gevent.contrib.flask import EchoMQ
    from echomq_gevent.contrib.ledger.sqlalchemy import metadata as ledger_metadata
    import ledger_after_commit

    db = SQLAlchemy()
    echomq = EchoMQ()

    class Effect(db.Model):
        __tablename__ = "ledger_effects"
        id = db.Column(db.Integer, primary_key=True)
        job_id = db.Column(db.String(255), nullable=False)
        run = db.Column(db.String(64), nullable=False)

    @echomq.processor(queue, "charge", atomic=True)
    def charge(job):
        run = uuid.uuid4().hex
        db.session.add(Effect(job_id=str(job.id), run=run))
        return {"run": run, "pid": os.getpid()}

    app = Flask("ledger_flask_proc")
    app.config.update(SQLALCHEMY_DATABASE_URI=url, ECHOMQ_REDIS_URL=redis_url, ECHOMQ_PREFIX=prefix,
                      ECHOMQ_ENTRY_POINTS=False,
                      ECHOMQ_QUEUES={queue: {"concurrency": 1, "lock_duration": 1000, "stalled_interval": 1000,
                                             "drain_delay": 0.5, "shutdown_timeout": 5}})
    db.init_app(app)
    echomq.init_app(app)
    with app.app_context():
        db.create_all()
        ledger_metadata.create_all(db.engine)

    state = echomq.state(app)
    plugins = list(state.plugins)
    after_commit = ledger_after_commit.from_environment()
    if after_commit is not None:
        plugins.append(after_commit)
    print("ledger worker ready", flush=True)
    with app.app_context():
        return state.run_worker(plugins=plugins)


if __name__ == "__main__":
    sys.exit(main())

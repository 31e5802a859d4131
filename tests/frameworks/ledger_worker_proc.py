"""A Django worker process whose queue's processors are ledgered (``ledger_jobs``: jobs
named ``charge`` and ``hold``; ``plain`` is not),
for the ledger's fault tests; run as ``manage.py echomq_worker`` runs it.

    python ledger_worker_proc.py DATABASE_JSON REDIS_URL PREFIX QUEUE [OPTIONS_JSON]

``DATABASE_JSON`` is ``settings.DATABASES['default']``; ``OPTIONS_JSON`` the queue's
worker options (the settings: ``ledger_settings.py``, which the children of ``offload:
process`` read too). With ``LEDGER_KILL_AFTER_COMMIT=1`` in the environment the process
SIGKILLs itself right after a job's processor and its ledger row committed and before the
job's completion is sent to Redis (``ledger_after_commit``); with
``LEDGER_STOP_AFTER_COMMIT=1`` it prints ``committed JOB_ID`` and SIGSTOPs itself there,
for a test that restarts Redis before letting it go on. Prints ``ledger worker ready``
once migrated.
"""
from gevent import monkey

monkey.patch_all()  # before Django loads, as manage.py echomq_worker has it

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main() -> int:
    database, redis_url, prefix, queue = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    os.environ.update(LEDGER_DATABASE=database, LEDGER_REDIS=redis_url, LEDGER_PREFIX=prefix, LEDGER_QUEUE=queue,
                      LEDGER_QUEUE_OPTIONS=sys.argv[5] if len(sys.argv) > 5 else "{}",
                      DJANGO_SETTINGS_MODULE="ledger_settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    import ledger_after_commit
    import ledger_jobs
    from echomq_gevent.contrib import django as integration

    call_command("migrate", verbosity=0)
    ledger_jobs.create_effects(connection)
    connection.close()
    integration.processor(queue, "charge")(ledger_jobs.charge)
    integration.processor(queue, "hold")(ledger_jobs.hold)
    integration.processor(queue, "plain")(ledger_jobs.plain)
    plugins = integration.worker_plugins()
    after_commit = ledger_after_commit.from_environment()
    if after_commit is not None:
        plugins.append(after_commit)
    print("ledger worker ready", flush=True)
    return integration.integration().run_worker(plugins=plugins)


if __name__ == "__main__":
    sys.exit(main())

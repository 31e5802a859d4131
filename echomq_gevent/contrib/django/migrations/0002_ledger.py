"""The effect ledger's table (``echomq_ledger``): one row per job whose atomic processor
committed. Written by hand to run on every Django the package supports (3.2 and up)."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("echomq_gevent", "0001_outbox")]

    operations = [
        migrations.CreateModel(
            name="LedgerRow",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("prefix", models.CharField(max_length=255)),
                ("queue", models.CharField(max_length=255)),
                ("job_id", models.CharField(max_length=255)),
                ("job_ts", models.BigIntegerField()),
                ("job_name", models.CharField(blank=True, default="", max_length=255)),
                ("return_value", models.TextField()),
                ("created_ms", models.BigIntegerField()),
            ],
            options={"db_table": "echomq_ledger"},
        ),
        migrations.AddConstraint(
            model_name="ledgerrow",
            constraint=models.UniqueConstraint(fields=("prefix", "queue", "job_id", "job_ts"),
                                               name="echomq_ledger_job"),
        ),
        migrations.AddIndex(
            model_name="ledgerrow",
            index=models.Index(fields=["created_ms"], name="echomq_ledger_created"),
        ),
    ]

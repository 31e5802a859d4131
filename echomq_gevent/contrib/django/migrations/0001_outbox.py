"""The outbox's tables (``echomq_outbox``, ``echomq_outbox_lock``) and the relay group's
lock row. Written by hand to run on every Django the package supports (3.2 and up)."""
from django.db import migrations, models


def lock_row(apps, schema_editor):
    OutboxLock = apps.get_model("echomq_gevent", "OutboxLock")
    OutboxLock.objects.using(schema_editor.connection.alias).get_or_create(
        name="relay", defaults={"owner": "", "lease_until_ms": 0})


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="OutboxRow",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=255)),
                ("name", models.CharField(max_length=255)),
                ("data", models.TextField()),
                ("opts", models.TextField()),
                ("job_id", models.CharField(max_length=255)),
                ("state", models.SmallIntegerField(choices=[(0, "pending"), (1, "added"), (2, "parked")],
                                                   default=0)),
                ("created_ms", models.BigIntegerField()),
                ("attempts", models.IntegerField(default=0)),
                ("last_error", models.TextField(blank=True, default="")),
                ("parked_ms", models.BigIntegerField(blank=True, null=True)),
                ("added_ms", models.BigIntegerField(blank=True, null=True)),
            ],
            options={"db_table": "echomq_outbox"},
        ),
        migrations.AddIndex(
            model_name="outboxrow",
            index=models.Index(fields=["state", "id"], name="echomq_outbox_state_id"),
        ),
        migrations.CreateModel(
            name="OutboxLock",
            fields=[
                ("name", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("owner", models.CharField(blank=True, default="", max_length=255)),
                ("lease_until_ms", models.BigIntegerField(default=0)),
            ],
            options={"db_table": "echomq_outbox_lock"},
        ),
        migrations.RunPython(lock_row, migrations.RunPython.noop),
    ]

"""The shop's tasks (Django's Tasks framework), found by `manage.py echomq_worker`."""
try:
    from django.tasks import task  # Django 6
except ImportError:  # Django 4.2 to 5.2: the django-tasks backport
    from django_tasks import task

from .models import Order


@task(queue_name="orders", takes_context=True)
def confirm_order(context, order_id):
    # Enqueued inside the order's transaction, added once it committed: the row is there.
    order = Order.objects.get(pk=order_id)
    order.status = "confirmed"
    order.confirmed_by = f"job {context.task_result.id}"
    order.save(update_fields=["status", "confirmed_by"])
    return {"order": order.pk, "status": order.status, "attempt": context.attempt}

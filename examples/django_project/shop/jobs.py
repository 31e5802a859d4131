"""Processors of the shop, found by the worker (settings.ECHOMQ 'discover', default 'jobs')."""
from echomq_gevent.contrib.django import processor

from .models import Order


@processor("orders", "confirm")
def confirm(job):
    # The job was added after the order's transaction committed: the row is there.
    order = Order.objects.get(pk=job.data["order_id"])
    order.status = "confirmed"
    order.confirmed_by = f"job {job.id}"
    order.save(update_fields=["status", "confirmed_by"])
    return {"order": order.pk, "status": order.status}

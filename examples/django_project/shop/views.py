import json

from django.conf import settings
from django.db import transaction
from django.http import HttpResponseNotAllowed, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt

from echomq_gevent.contrib.django import enqueue_on_commit

from .models import Order


@csrf_exempt
def orders(request):
    """POST {"email": ...}: save an order and confirm it in the background."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    body = json.loads(request.body or b"{}")
    with transaction.atomic():
        order = Order.objects.create(email=body.get("email", ""))
        # Added once the transaction commits; a rollback adds nothing.
        if settings.TASKS_FRAMEWORK:
            from .tasks import confirm_order

            confirm_order.enqueue(order.pk)
        else:  # Django 3.2 has no Tasks framework: a job for the processor of jobs.py
            enqueue_on_commit("orders", "confirm", {"order_id": order.pk})
    return JsonResponse({"id": order.pk, "status": order.status}, status=201)


def order(request, pk):
    o = get_object_or_404(Order, pk=pk)
    return JsonResponse({"id": o.pk, "status": o.status, "confirmed_by": o.confirmed_by})

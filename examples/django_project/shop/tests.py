"""The shop's own tests (`python manage.py test shop`), with echomq-gevent's testing kit:
the view enqueues, the test runs the job as the worker would, in its own process."""
import json

from django.conf import settings
from django.test import TestCase

from echomq_gevent.contrib.django import integration, queue
from echomq_gevent.contrib.django.testing import drain
from echomq_gevent.testing import assert_enqueued, delete_prefix, new_prefix

from .models import Order


class OrderTests(TestCase):
    def setUp(self):
        # the jobs of this test under a prefix of their own, removed afterwards
        prefix = new_prefix()
        override = self.settings(ECHOMQ={**settings.ECHOMQ, "prefix": prefix})
        override.enable()
        self.addCleanup(override.disable)
        self.addCleanup(lambda: delete_prefix(integration().redis_url, prefix))

    def test_an_order_is_confirmed_by_its_job(self):
        with self.captureOnCommitCallbacks(execute=True):  # what the view enqueues on commit
            response = self.client.post("/orders", data=json.dumps({"email": "ada@example.com"}),
                                        content_type="application/json")
        self.assertEqual(response.status_code, 201)
        [job] = assert_enqueued(queue("orders"), count=1)

        result = drain(raise_errors=True)

        self.assertEqual([o.id for o in result.completed], [job.id])
        order = Order.objects.get(pk=response.json()["id"])
        self.assertEqual(order.status, "confirmed")
        self.assertEqual(order.confirmed_by, f"job {job.id}")

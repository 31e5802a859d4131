"""Testing a Django project's jobs the Django way: a ``django.test.TestCase`` (its
transaction never commits), ``captureOnCommitCallbacks``, ``override_settings`` pointing
``ECHOMQ`` at the test's Redis, and ``echomq_gevent.contrib.django.testing.drain`` running
the project's processors and tasks in the test's process, the outbox's uncommitted rows
relayed through the test's connection."""
from __future__ import annotations

import json
import os
import sys

import pytest

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402
from django.test import TestCase  # noqa: E402

PROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "examples", "django_project")


@pytest.fixture(scope="module")
def shop(django_shop):
    """Django set up with the example shop's settings (conftest's ``django_shop``)."""
    return django_shop


@pytest.mark.usefixtures("shop")
class ShopJobsTest(TestCase):
    @pytest.fixture(autouse=True)
    def _redis(self, redis_url, prefix):
        self.echomq = dict(settings.ECHOMQ, redis=redis_url, prefix=prefix)

    def _order(self):
        response = self.client.post("/orders", data=json.dumps({"email": "test@example.com"}),
                                    content_type="application/json")
        self.assertEqual(response.status_code, 201, response.content)
        return response.json()["id"]

    def test_the_view_enqueues_after_the_commit_and_drain_runs_it(self):
        from echomq_gevent.contrib.django import queue
        from echomq_gevent.contrib.django.testing import drain
        from echomq_gevent.testing import assert_enqueued
        from shop.models import Order

        with self.settings(ECHOMQ=self.echomq):
            with self.captureOnCommitCallbacks(execute=True):
                pk = self._order()
            [job] = assert_enqueued(queue("orders"), count=1)
            result = drain()
            self.assertEqual([o.id for o in result.completed], [job.id])
            order = Order.objects.get(pk=pk)  # the test's transaction: not committed, seen by the job
            self.assertEqual(order.status, "confirmed")
            self.assertEqual(order.confirmed_by, f"job {job.id}")

    def test_drain_relays_the_outbox_rows_the_test_wrote(self):
        from echomq_gevent.contrib.django import queue
        from echomq_gevent.contrib.django.testing import drain
        from shop.models import Order

        with self.settings(ECHOMQ=dict(self.echomq, outbox=True)):
            pk = self._order()  # the job is a row of the (never committed) test transaction
            self.assertEqual(queue("orders").get_job_counts("waiting", "prioritized"),
                             {"waiting": 0, "prioritized": 0})
            result = drain()
            self.assertEqual(len(result.completed), 1)
            self.assertEqual(Order.objects.get(pk=pk).status, "confirmed")

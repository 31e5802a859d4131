"""The shop's own tests: a request enqueues after its transaction commits, the test runs
the job as the worker would."""
import json

from pyramid.request import Request

from echomq_gevent.contrib.pyramid import integration
from echomq_gevent.testing import assert_enqueued


def _post(app, body):
    return Request.blank("/orders", method="POST", body=json.dumps(body).encode(),
                         content_type="application/json").get_response(app)


def test_an_order_is_confirmed_by_its_job(app):
    order_id = _post(app, {"email": "ada@example.com"}).json["id"]
    jobs = integration(app.registry)
    assert_enqueued(jobs.queue("orders"), "confirm", count=1)

    result = jobs.drain(raise_errors=True)

    assert len(result.completed) == 1
    assert Request.blank(f"/orders/{order_id}").get_response(app).json["status"] == "confirmed"

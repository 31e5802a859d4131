"""The shop's own tests: a request enqueues, the test runs the job as the worker would."""
from flaskshop import echomq

from echomq_gevent.testing import assert_enqueued


def test_an_order_is_confirmed_by_its_job(app):
    client = app.test_client()
    created = client.post("/orders", json={"email": "ada@example.com"})
    assert created.status_code == 201
    order_id = created.get_json()["id"]
    assert_enqueued(echomq.queue("orders", app), "confirm", data={"order_id": order_id}, count=1)

    result = echomq.state(app).drain(raise_errors=True)

    assert result.values == [{"order": order_id, "status": "confirmed"}]
    assert client.get(f"/orders/{order_id}").get_json()["status"] == "confirmed"


def test_a_rolled_back_order_enqueues_nothing(app):
    from flaskshop import Order, db

    with app.app_context():
        db.session.add(Order(email="gone@example.com"))
        db.session.flush()
        echomq.enqueue_after_commit("orders", "confirm", {"order_id": 1})
        db.session.rollback()
        assert echomq.state(app).drain().completed == []

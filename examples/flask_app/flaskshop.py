"""The example shop on Flask, Flask-SQLAlchemy (SQLite) and echomq-gevent.

    flask --app flaskshop init-db
    flask --app flaskshop run                 # POST /orders, GET /orders/<id>
    flask --app flaskshop echomq worker       # confirms the orders in the background
"""
import os

from flask import Flask, abort, jsonify, request
from flask_sqlalchemy import SQLAlchemy

from echomq_gevent.contrib.flask import EchoMQ

db = SQLAlchemy()
echomq = EchoMQ()


class Order(db.Model):
    id = db.Column(db.Integer, primary_key=True)
    email = db.Column(db.String(200), nullable=False)
    status = db.Column(db.String(20), nullable=False, default="new")
    confirmed_by = db.Column(db.String(100), nullable=False, default="")


@echomq.processor("orders", "confirm")
def confirm(job):
    # Runs in an app context of its own; the order's transaction committed before the
    # job was added, so the row is there.
    order = db.session.get(Order, job.data["order_id"])
    order.status = "confirmed"
    order.confirmed_by = f"job {job.id}"
    db.session.commit()
    return {"order": order.id, "status": order.status}


def create_app():
    app = Flask(__name__)
    db_path = os.environ.get("SHOP_DB", os.path.join(app.instance_path, "shop.sqlite3"))
    # SHOP_DATABASE_URL (e.g. postgresql://...) runs the shop on another database
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ.get("SHOP_DATABASE_URL") or f"sqlite:///{db_path}"
    app.config["ECHOMQ_REDIS_URL"] = os.environ.get("REDIS_URL", "embedded")
    app.config["ECHOMQ_PREFIX"] = os.environ.get("ECHOMQ_PREFIX", "bull")
    app.config["ECHOMQ_QUEUES"] = {"orders": {"concurrency": 5, "shutdown_timeout": 10}}
    # SHOP_OUTBOX=1: jobs go through the transactional outbox (written with the order)
    app.config["ECHOMQ_OUTBOX"] = os.environ.get("SHOP_OUTBOX") == "1"
    os.makedirs(os.path.dirname(db_path), exist_ok=True)
    db.init_app(app)
    echomq.init_app(app)

    @app.cli.command("init-db")
    def init_db():
        """Create the tables (the shop's and the outbox's)."""
        from echomq_gevent.contrib.outbox.sqlalchemy import metadata as outbox_metadata

        db.create_all()
        outbox_metadata.create_all(db.engine)

    @app.post("/orders")
    def create_order():
        order = Order(email=(request.get_json(silent=True) or {}).get("email", ""))
        db.session.add(order)
        db.session.flush()
        # Added once db.session commits; a rollback adds nothing.
        echomq.enqueue_after_commit("orders", "confirm", {"order_id": order.id})
        db.session.commit()
        return jsonify(id=order.id, status=order.status), 201

    @app.get("/orders/<int:pk>")
    def show_order(pk):
        order = db.session.get(Order, pk) or abort(404)
        return jsonify(id=order.id, status=order.status, confirmed_by=order.confirmed_by)

    return app

"""The example shop on Pyramid, pyramid_tm, SQLAlchemy (SQLite) and echomq-gevent.

    python pyramidshop.py development.ini init-db
    pserve development.ini                                    # POST /orders, GET /orders/{id}
    python -m echomq_gevent.contrib.pyramid development.ini   # confirms the orders
"""
import json
import os
import sys

import zope.sqlalchemy
from pyramid.config import Configurator
from pyramid.httpexceptions import HTTPNotFound
from sqlalchemy import Column, Integer, String, engine_from_config
from sqlalchemy.orm import declarative_base, sessionmaker

from echomq_gevent.contrib.pyramid import job_request, processor

Base = declarative_base()


class Order(Base):
    __tablename__ = "orders"
    id = Column(Integer, primary_key=True)
    email = Column(String(200), nullable=False)
    status = Column(String(20), nullable=False, default="new")
    confirmed_by = Column(String(100), nullable=False, default="")


@processor("orders", "confirm")
def confirm(job):
    # A request of the app, in a transaction of its own (request.tm) that commits when
    # this returns; the order's transaction committed before the job was added.
    request = job_request()
    order = request.dbsession.get(Order, job.data["order_id"])
    order.status = "confirmed"
    order.confirmed_by = f"job {job.id}"
    return {"order": order.id, "status": order.status}


def create_order(request):
    order = Order(email=(request.json_body if request.body else {}).get("email", ""))
    request.dbsession.add(order)
    request.dbsession.flush()
    # Added after pyramid_tm commits the request's transaction; nothing if it aborts.
    request.enqueue_job("orders", "confirm", {"order_id": order.id})
    if request.params.get("fail"):
        raise RuntimeError("the view failed after asking for the job")
    request.response.status_code = 201
    return {"id": order.id, "status": order.status}


def show_order(request):
    order = request.dbsession.get(Order, int(request.matchdict["id"]))
    if order is None:
        raise HTTPNotFound()
    return {"id": order.id, "status": order.status, "confirmed_by": order.confirmed_by}


def _dbsession(request):
    session = request.registry["dbsession_factory"]()
    zope.sqlalchemy.register(session, transaction_manager=request.tm)
    return session


def main(global_config, **settings):
    with Configurator(settings=settings) as config:
        config.include("pyramid_tm")
        config.include("echomq_gevent.contrib.pyramid")
        engine = engine_from_config(settings, "sqlalchemy.")
        config.registry["dbsession_factory"] = sessionmaker(bind=engine)
        config.registry["engine"] = engine
        config.add_request_method(_dbsession, "dbsession", reify=True)
        config.add_route("orders", "/orders", request_method="POST")
        config.add_route("order", "/orders/{id}", request_method="GET")
        config.add_view(create_order, route_name="orders", renderer="json")
        config.add_view(show_order, route_name="order", renderer="json")
        return config.make_wsgi_app()


if __name__ == "__main__":
    from pyramid.paster import bootstrap

    if sys.argv[2:] == ["init-db"]:
        with bootstrap(sys.argv[1]) as env:
            os.makedirs(os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "var"), exist_ok=True)
            from echomq_gevent.contrib.outbox.sqlalchemy import metadata as outbox_metadata

            Base.metadata.create_all(env["registry"]["engine"])
            outbox_metadata.create_all(env["registry"]["engine"])  # for echomq.outbox = true
        print(json.dumps({"created": list(Base.metadata.tables) + list(outbox_metadata.tables)}))

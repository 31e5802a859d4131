"""The shop's tests use echomq-gevent's testing kit: a throwaway Redis for the run (or
$REDIS_URL) and a key prefix per test."""
import pytest

pytest_plugins = ["echomq_gevent.testing"]


@pytest.fixture
def app(tmp_path, echomq_redis_url, echomq_prefix):
    import pyramidshop

    app = pyramidshop.main({}, **{"sqlalchemy.url": f"sqlite:///{tmp_path / 'shop.sqlite3'}",
                                  "echomq.redis_url": echomq_redis_url, "echomq.prefix": echomq_prefix,
                                  "echomq.queues.orders.concurrency": "1"})
    pyramidshop.Base.metadata.create_all(app.registry["engine"])
    return app

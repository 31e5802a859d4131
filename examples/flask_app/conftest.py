"""The shop's tests use echomq-gevent's testing kit: a throwaway Redis for the run (or
$REDIS_URL) and a key prefix per test."""
import pytest

pytest_plugins = ["echomq_gevent.testing"]


@pytest.fixture
def app(tmp_path, monkeypatch, echomq_redis_url, echomq_prefix):
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    monkeypatch.setenv("REDIS_URL", echomq_redis_url)
    monkeypatch.setenv("ECHOMQ_PREFIX", echomq_prefix)
    import flaskshop

    app = flaskshop.create_app()
    with app.app_context():
        flaskshop.db.create_all()
    return app

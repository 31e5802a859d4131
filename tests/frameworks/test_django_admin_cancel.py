"""Cancelling jobs from Django's admin (``cancel_jobs_action``) with the real Django, the
example shop's ``Order`` model on SQLite, a real worker and Redis: a waiting job ends
failed, a running one is stopped by its worker, and an object without a job, a job that
does not exist or a Redis that cannot be reached is a message, never an error page."""
from __future__ import annotations

import pytest

django = pytest.importorskip("django")


@pytest.fixture
def echomq(django_shop, redis_url, prefix):
    from django_echomq import django_echomq_settings

    with django_echomq_settings(redis_url, prefix, ["exports"]) as integration:
        yield integration


def _run_action(action, queryset):
    """Run ``action`` as the admin does, on a real ModelAdmin and request; the messages."""
    from django.contrib.admin import AdminSite, ModelAdmin
    from django.contrib.messages.storage.base import BaseStorage
    from django.test import RequestFactory

    from shop.models import Order

    class Kept(BaseStorage):
        def _get(self, *args, **kwargs):
            return [], True

        def _store(self, messages, response, *args, **kwargs):
            return []

    request = RequestFactory().post("/admin/shop/order/")
    request._messages = Kept(request)
    action(ModelAdmin(Order, AdminSite()), request, queryset)
    return [(m.level_tag, m.message) for m in request._messages._queued_messages]


def test_the_action_cancels_a_waiting_and_a_running_job_and_says_what_it_did(echomq, redis_url, prefix, wait_for):
    import gevent

    from integration.worker_helpers import make_worker, running, sleeper_until_cancelled
    from shop.models import Order

    from echomq_gevent.contrib.django.admin_actions import cancel_jobs_action

    action = cancel_jobs_action("exports", job_id=lambda o: f"export-{o.pk}" if o.email != "none@x" else None,
                                reason="stopped in the admin")
    assert action.allowed_permissions == ("change",)
    assert "exports" in action.short_description
    q = echomq.queue("exports")
    busy, waiting, nojob, gone = (Order.objects.create(email=e) for e in ("busy@x", "waiting@x", "none@x", "gone@x"))
    q.add("export", {}, {"jobId": f"export-{busy.pk}"})
    proc, started, stopped = sleeper_until_cancelled()
    with running(make_worker(redis_url, prefix, "exports", proc)):
        assert started.wait(10)
        q.add("export", {}, {"jobId": f"export-{waiting.pk}"})  # behind the busy one (concurrency 1)
        msgs = _run_action(action, Order.objects.filter(pk__in=[busy.pk, waiting.pk, nojob.pk, gone.pk]).order_by("pk"))
        wait_for(lambda: q.get_job_state(f"export-{busy.pk}") == "failed", timeout=10, what="the running job failed")
        gevent.sleep(0)
    assert stopped and stopped[0][0] == "stopped in the admin"
    assert q.get_job_state(f"export-{waiting.pk}") == "failed"
    assert "job cancelled: stopped in the admin" in q.get_job(f"export-{waiting.pk}").failed_reason
    levels = [level for level, _ in msgs]
    assert levels == ["success", "success", "warning", "info"], msgs
    assert "its worker was told to stop it" in msgs[0][1]
    assert "it is now failed and will not run" in msgs[1][1]
    assert "no job to cancel" in msgs[2][1]
    assert "does not exist" in msgs[3][1]
    # a second time: both are finished, nothing changes
    again = _run_action(action, Order.objects.filter(pk__in=[busy.pk, waiting.pk]).order_by("pk"))
    assert [level for level, _ in again] == ["info", "info"] and all("already failed" in m for _, m in again)


def test_an_unreachable_redis_or_an_undeclared_queue_is_a_message(echomq, django_shop):
    from django.conf import settings

    from redis_server import free_port
    from shop.models import Order

    from echomq_gevent.contrib.django.admin_actions import cancel_jobs_action

    order = Order.objects.create(email="away@x")
    undeclared = _run_action(cancel_jobs_action("nope", job_id="pk"), Order.objects.filter(pk=order.pk))
    assert len(undeclared) == 1 and undeclared[0][0] == "error" and "'nope'" in undeclared[0][1]
    settings.ECHOMQ = dict(settings.ECHOMQ, redis=f"redis://127.0.0.1:{free_port()}/0")
    echomq.reset()
    away = _run_action(cancel_jobs_action("exports", job_id="pk"), Order.objects.filter(pk=order.pk))
    assert len(away) == 1 and away[0][0] == "error" and "could not be cancelled" in away[0][1], away


def test_bad_arguments_are_refused_when_the_action_is_made():
    from echomq_gevent.contrib.django.admin_actions import cancel_jobs_action

    with pytest.raises(ValueError):
        cancel_jobs_action("exports", reason="x" * 5000)
    with pytest.raises(TypeError):
        cancel_jobs_action("exports", job_id=3)

"""The dashboard's "Cancel job" button: offered for jobs that wait or run, confirmed, and
posted with the CSRF token (refused without it); a waiting job ends failed."""
from __future__ import annotations

import io
from urllib.parse import urlencode

from echomq_gevent.contrib.dashboard import Dashboard

from integration.contrib.test_dashboard_metrics import _get

TOKEN = "t" * 40


def _post(app, form, cookie=TOKEN):
    answer = {}

    def start_response(status, headers):
        answer["status"] = status
        answer["headers"] = headers

    data = urlencode(form).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/action", "QUERY_STRING": "", "SCRIPT_NAME": "",
               "CONTENT_TYPE": "application/x-www-form-urlencoded", "CONTENT_LENGTH": str(len(data)),
               "wsgi.input": io.BytesIO(data), "wsgi.url_scheme": "http", "HTTP_HOST": "localhost",
               "HTTP_COOKIE": f"echomq_csrf={cookie}"}
    body = b"".join(app(environ, start_response))
    return answer["status"], body.decode("utf-8")


def test_cancel_button_confirm_and_post(queue, redis_url, prefix, qname):
    ui = Dashboard(redis_url, prefix=prefix, queues=[qname], actions=True)
    job = queue.add("slow", {}, {"delay": 60000})
    status, body = _get(ui, "/job", f"queue={qname}&id={job.id}")
    assert status.startswith("200") and 'data-action="cancel"' in body
    status, body = _get(ui, "/confirm", f"queue={qname}&action=cancel&job={job.id}&state=delayed")
    assert status.startswith("200") and "Cancel job" in body and 'name="reason"' in body

    form = {"queue": qname, "action": "cancel", "job": job.id, "reason": "clicked"}
    status, _ = _post(ui, dict(form, csrf="wrong" + TOKEN))
    assert status.startswith("403") and queue.get_job_state(job.id) == "delayed"

    status, _ = _post(ui, dict(form, csrf=TOKEN))
    assert status.startswith("303") or status.startswith("302"), status
    assert queue.get_job(job.id).failed_reason == "job cancelled: clicked"
    status, body = _get(ui, "/job", f"queue={qname}&id={job.id}")
    assert 'data-action="cancel"' not in body  # a failed job has nothing left to cancel

    read_only = Dashboard(redis_url, prefix=prefix, queues=[qname])
    other = queue.add("x", {})
    status, _ = _post(read_only, {"queue": qname, "action": "cancel", "job": other.id, "csrf": TOKEN})
    assert status.startswith("403") and queue.get_job_state(other.id) == "waiting"
    ui.close()
    read_only.close()

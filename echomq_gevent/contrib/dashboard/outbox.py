"""The dashboard's outbox section (under the queues of the overview): for each outbox
registered in this process (an app with the outbox on, see
:mod:`echomq_gevent.contrib.outbox`), its waiting rows, the age of the oldest, the parked
rows with their reasons and the relay's state. Empty when the process has no outbox.
Runs on the request's greenlet; the parked rows are read from the database then."""
from __future__ import annotations

from typing import Any, List

from .render import h, when

#: parked rows shown per outbox
SHOWN = 20


def outbox_section(ui: Any, req: Any) -> str:
    from ..outbox.registry import registered

    boxes = registered()
    if not boxes:
        return ""
    parts: List[str] = ['<h2 id="outbox">Outbox</h2><table id="outboxes"><tr><th>app</th><th>waiting</th>'
                        '<th>oldest</th><th>parked</th><th>relay</th><th>last error</th></tr>']
    parked_parts: List[str] = []
    for box in boxes:
        s = box.status()
        age = s.get("oldest_age_s")
        old = " <span class=tag>too old</span>" if s.get("too_old") else ""
        parts.append(
            f'<tr data-outbox="{h(box.label)}"><td>{h(box.label)}</td><td class="n">{h(s.get("waiting"))}</td>'
            f'<td class="n">{h("-" if age is None else f"{age:.1f} s")}{old}</td>'
            f'<td class="n">{h(s.get("parked"))}</td><td>{h(s.get("state"))}'
            f'{" (leader)" if s.get("leader") else ""}</td>'
            f'<td>{h(s.get("error") or s.get("last_error") or "")}</td></tr>')
        if s.get("parked"):
            try:
                rows = box.parked(SHOWN)
            except Exception as exc:
                parked_parts.append(f"<p>{h(box.label)}: the parked rows cannot be read: {h(exc)}</p>")
                continue
            lines = "".join(
                f'<tr data-parked="{r.id}"><td class="n">{r.id}</td><td>{h(r.queue)}</td><td>{h(r.name)}</td>'
                f'<td>{h(r.job_id)}</td><td>{h(when(r.parked_ms))}</td><td>{h(r.last_error)}</td></tr>'
                for r in rows)
            parked_parts.append(
                f'<h3>{h(box.label)}: parked rows</h3><table class="parked"><tr><th>row</th><th>queue</th>'
                f'<th>job</th><th>job id</th><th>parked</th><th>reason</th></tr>{lines}</table>'
                f'<p>Retry them with the framework\'s outbox command (<code>manage.py echomq_outbox retry ID</code>, '
                f'<code>flask echomq outbox retry ID</code>).</p>')
    parts.append("</table>")
    return "".join(parts + parked_parts)

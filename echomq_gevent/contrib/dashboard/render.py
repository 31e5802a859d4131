"""How the dashboard writes HTML: escaping, the formats of values, the throughput chart
and the layout every page shares.

Every value that reaches a page goes through :func:`h` (or is a number this package
computed); the layout inlines ``static/dashboard.css`` and ``static/dashboard.js`` under
the answer's nonce, so the Content Security Policy can refuse every other script.
"""
from __future__ import annotations

import html
import json
import os
import time
from typing import Any, Dict, Optional

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def _static(name: str) -> str:
    path = os.path.join(STATIC, name)
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise RuntimeError(f"the dashboard's {name} is missing ({path}): the package is installed "
                           f"without its data files; reinstall echomq-gevent") from exc


#: The stylesheet and the script of every page (read once, at import).
CSS = _static("dashboard.css")
JS = _static("dashboard.js")


def h(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def pretty(value: Any) -> str:
    """A value as indented JSON (its ``repr`` when it is not JSON)."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def when(ms: Any) -> str:
    """A BullMQ timestamp (ms since the epoch) as UTC text; ``""`` for none."""
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return ""
    if ms <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000.0)) + ".%03d UTC" % (ms % 1000)


def short(value: Any, limit: int = 120) -> str:
    """A value as one line of at most ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def chart(t: Dict[str, Any], width: int, height: int, axis: bool = False) -> str:
    """An inline SVG line chart of completed (and failed) per interval, from a series of
    :meth:`~echomq_gevent.contrib.dashboard.reads.Reads.throughput`; the page's script
    redraws it from ``/api/counts`` while the page is open."""
    payload = h(json.dumps(t))
    peak = max([1.0] + list(t["completed"]) + list(t["failed"]))
    lines = []
    for kind in ("completed", "failed"):
        values = list(t[kind])
        if len(values) == 1:
            values = values * 2  # one minute recorded: a flat line at its value
        if len(values) < 2:
            continue
        step = width / (len(values) - 1)
        pts = " ".join(f"{i * step:.1f},{height - 2 - v / peak * (height - 4):.1f}" for i, v in enumerate(values))
        lines.append(f'<polyline class="{kind}" points="{pts}"/>')
    if not lines:
        lines.append(f'<text x="4" y="{height // 2}" class="empty">no data yet</text>')
    label = ""
    if axis:
        label = (f'<figcaption>completed (green) and failed (red), {h(t["unit"])}, peak '
                 f'<span class="peak">{peak:g}</span>; from '
                 f'{"BullMQ metrics" if t["source"] == "metrics" else "count samples of this page"}</figcaption>')
    return (f'<figure class="tp"><svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'data-series="{payload}" role="img" aria-label="throughput">{"".join(lines)}</svg>{label}</figure>')


def layout(home: str, site_title: str, read_only: bool, nonce: str, title: str, body: str,
           poll_url: Optional[str] = None) -> bytes:
    """A whole page: the header (``home`` link, ``site_title``, the mode), ``body`` (HTML
    already escaped by its maker), and the script, which polls ``poll_url`` when given."""
    mode = "read-only" if read_only else "actions enabled"
    poll_attr = f' data-poll="{h(poll_url)}"' if poll_url else ""
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{h(title)} - {h(site_title)}</title><style nonce=\"{nonce}\">{CSS}</style></head>"
        f'<body{poll_attr}><header><a href="{h(home)}">{h(site_title)}</a>'
        f'<span class="mode">{mode}</span></header><main>{body}</main>'
        f'<script nonce="{nonce}">{JS}</script></body></html>')
    return text.encode("utf-8")

"""The request object of the dashboard and its refusals (the HTTP errors a page answers).

Everything here runs on the greenlet (or thread) of the WSGI server that serves the
request; nothing touches Redis.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlencode

from .render import h

Environ = Dict[str, Any]
#: What a page handler returns: the status line, the headers and the body.
Response = Tuple[str, List[Tuple[str, str]], bytes]
#: The largest form body an action may post.
MAX_FORM_BYTES = 16 * 1024


class Refused(Exception):
    """A request the dashboard answers with an error page (``status`` such as
    ``"404 Not Found"``, ``message`` shown on the page, escaped)."""

    def __init__(self, status: str, message: str, headers: Optional[List[Tuple[str, str]]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers or [])


class Request:
    """One request: its path below the mount point, query, the page's script nonce and the
    visitor's CSRF token (``cookie``; ``had_cookie`` is false when this answer sets it)."""

    def __init__(self, environ: Environ, nonce: str, cookie: str, had_cookie: bool) -> None:
        self.environ = environ
        self.nonce = nonce
        self.cookie = cookie
        self.had_cookie = had_cookie
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        raw = environ.get("PATH_INFO", "") or "/"
        try:
            raw = raw.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
        self.path = raw.rstrip("/") or "/"
        self.base = environ.get("SCRIPT_NAME", "").rstrip("/")
        self.query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).items()}

    def arg(self, key: str, default: Optional[str] = None) -> str:
        """A query parameter; 400 when it is missing and has no default."""
        value = self.query.get(key, default)
        if value is None:
            raise Refused("400 Bad Request", f"the address needs the parameter {key!r}")
        return value

    def url(self, path: str, **params: Any) -> str:
        """A link to ``path`` of this dashboard, wherever it is mounted."""
        url = self.base + path
        if params:
            url += "?" + urlencode(params)
        return url

    def form(self) -> Dict[str, str]:
        """The posted form (at most :data:`MAX_FORM_BYTES`, else 413)."""
        try:
            length = int(self.environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_FORM_BYTES:
            raise Refused("413 Payload Too Large", f"form larger than {MAX_FORM_BYTES} bytes")
        raw = self.environ["wsgi.input"].read(length) if length > 0 else b""
        parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in parsed.items()}

    def flash(self) -> str:
        """The note an action left for the page it redirected to (``done=``), escaped."""
        done = self.query.get("done")
        return f'<p class="flash" id="flash">{h(done)}</p>' if done else ""


def cookie(environ: Environ, name: str) -> str:
    """The value of the request's cookie ``name``, or ``""``."""
    for part in environ.get("HTTP_COOKIE", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return ""


def redirect(location: str) -> Response:
    return "303 See Other", [("Location", location), ("Content-Type", "text/plain")], b""


def int_arg(text: str, label: str, low: int) -> int:
    """``text`` as an integer of at least ``low``; 400 naming ``label`` otherwise."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise Refused("400 Bad Request", f"{label} must be an integer, got {text!r}") from None
    if value < low:
        raise Refused("400 Bad Request", f"{label} must be >= {low}, got {value}")
    return value

"""What keeps the dashboard safe: who may see it, which posts are trusted, what a page
may run.

- Authentication: an ``auth`` callable gets the WSGI environ of every request
  (:func:`basic_auth` makes one for HTTP Basic; :func:`auth_from_env` reads the
  standalone server's environment variables).
- CSRF: every visitor gets a random token in an ``HttpOnly``, ``SameSite=Strict``
  cookie; an action must post the same token (:func:`check_post`), and a post whose
  ``Origin`` is another host is refused.
- Every answer carries a Content Security Policy that lets only the page's own style
  and script (by a nonce per answer) load, and refuses framing (:func:`headers`).
"""
from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from typing import Any, Callable, Dict, List, Optional, Tuple

from .web import Environ, Refused, Request, cookie

CSRF_COOKIE = "echomq_csrf"
#: Shorter cookies than this are replaced by a fresh token.
_TOKEN_MIN = 32


def basic_auth(user: str, password: str, realm: str = "echomq") -> Callable[[Environ], bool]:
    """An ``auth`` callable for :class:`~echomq_gevent.contrib.dashboard.Dashboard` that
    asks for HTTP Basic credentials."""
    if not user or not password:
        raise ValueError("basic_auth needs a non-empty user and password")
    expected_user = user.encode("utf-8")
    expected_password = password.encode("utf-8")

    def check(environ: Environ) -> bool:
        header = environ.get("HTTP_AUTHORIZATION", "")
        if not header.lower().startswith("basic "):
            return False
        try:
            raw = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        got_user, _, got_password = raw.partition(b":")
        # both compared, so the time taken does not tell which one was wrong
        ok_user = hmac.compare_digest(got_user, expected_user)
        ok_password = hmac.compare_digest(got_password, expected_password)
        return ok_user and ok_password

    check.realm = realm  # type: ignore[attr-defined]
    return check


def auth_from_env(environ: Optional[Dict[str, str]] = None) -> Optional[Callable[[Environ], bool]]:
    """Basic auth from ``ECHOMQ_DASHBOARD_USER``/``ECHOMQ_DASHBOARD_PASSWORD`` when both are set."""
    env = os.environ if environ is None else environ
    user, password = env.get("ECHOMQ_DASHBOARD_USER"), env.get("ECHOMQ_DASHBOARD_PASSWORD")
    if not user and not password:
        return None
    if not (user and password):
        raise ValueError("set both ECHOMQ_DASHBOARD_USER and ECHOMQ_DASHBOARD_PASSWORD, or neither")
    return basic_auth(user, password)


def authenticate(auth: Optional[Callable[[Environ], bool]], environ: Environ) -> None:
    """Refuse (401, with a Basic challenge when ``auth`` names a realm) unless ``auth``
    lets the request in; no ``auth`` lets everyone in."""
    if auth is None or auth(environ):
        return
    realm = getattr(auth, "realm", None)
    extra = [("WWW-Authenticate", f'Basic realm="{realm}"')] if realm else []
    raise Refused("401 Unauthorized", "sign in to see this dashboard", extra)


def open_request(environ: Environ) -> Tuple[Request, Optional[str]]:
    """The request with a fresh script nonce and the visitor's CSRF token; the second
    value is a new token to set as the cookie (``None`` when the visitor has one)."""
    nonce = secrets.token_urlsafe(16)
    token = cookie(environ, CSRF_COOKIE)
    if token and len(token) >= _TOKEN_MIN:
        return Request(environ, nonce, token, had_cookie=True), None
    token = secrets.token_urlsafe(_TOKEN_MIN)
    return Request(environ, nonce, token, had_cookie=False), token


def check_post(req: Request, form: Dict[str, str]) -> None:
    """Refuse (403) an action whose form lacks the visitor's CSRF token, or that comes
    from another origin than the host it was sent to."""
    token = form.get("csrf", "")
    if not token or not req.had_cookie or not hmac.compare_digest(token, req.cookie):
        raise Refused("403 Forbidden", "the form's CSRF token is missing or does not match this "
                                       "browser's cookie; reload the page and try again")
    origin = req.environ.get("HTTP_ORIGIN")
    hosts = {req.environ.get("HTTP_HOST", ""), req.environ.get("HTTP_X_FORWARDED_HOST", "")} - {""}
    if origin and origin.split("://", 1)[-1] not in hosts:
        raise Refused("403 Forbidden", f"cross-origin request from {origin!r} refused")


def headers(req: Request, new_token: Optional[str]) -> List[Tuple[str, str]]:
    """The headers every answer carries: the CSRF cookie when it is new, no caching,
    no sniffing or framing, and the Content Security Policy of the page's nonce."""
    out: List[Tuple[str, str]] = []
    environ: Dict[str, Any] = req.environ
    if new_token:
        path = environ.get("SCRIPT_NAME", "") or "/"
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        out.append(("Set-Cookie", f"{CSRF_COOKIE}={new_token}; Path={path}; HttpOnly; SameSite=Strict{secure}"))
    nonce = req.nonce
    out += [
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "same-origin"),
        ("Content-Security-Policy",
         f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
         "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
         "frame-ancestors 'none'"),
    ]
    return out

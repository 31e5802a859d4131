"""The URL forms that name several Redis nodes: ``redis+cluster://`` (a few nodes of a
Redis Cluster) and ``redis+sentinel://`` (the sentinels watching a primary), and
:func:`redact_url` for putting any Redis URL in a log line or an error message.

Both forms share their network part, ``[[user]:password@]host:port[,host:port...]``:
the user and password are the data nodes' (:func:`_userinfo_and_nodes` reads it for
both). What the nodes are and what the path and query may hold differ, and each
parser names the form in its error.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["CLUSTER_SCHEME", "CLUSTER_TLS_SCHEME", "ClusterURL", "parse_cluster_url", "SENTINEL_SCHEME",
           "SENTINEL_QUERY_KEYS", "SentinelURL", "parse_sentinel_url", "redact_url"]

CLUSTER_SCHEME = "redis+cluster"
#: TLS to every node.
CLUSTER_TLS_SCHEME = "rediss+cluster"
SENTINEL_SCHEME = "redis+sentinel"
#: Query parameters a ``redis+sentinel://`` URL takes.
SENTINEL_QUERY_KEYS = ("sentinel_username", "sentinel_password", "db")


class ClusterURL(NamedTuple):
    """What a ``redis+cluster://`` URL names."""

    nodes: List[Tuple[str, int]]
    username: Optional[str]
    password: Optional[str]
    tls: bool


class SentinelURL(NamedTuple):
    """What a ``redis+sentinel://`` URL names."""

    sentinels: List[Tuple[str, int]]
    service: str
    db: int
    username: Optional[str]
    password: Optional[str]
    sentinel_username: Optional[str]
    sentinel_password: Optional[str]


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for log lines and error messages."""
    url = re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)
    return re.sub(r"([?&]sentinel_password=)[^&]*", r"\1***", url)


def _userinfo_and_nodes(netloc: str, what: str, error: Callable[[str], ValueError]
                        ) -> Tuple[Optional[str], Optional[str], List[Tuple[str, int]]]:
    """(username, password, [(host, port), ...]) of ``[[user]:password@]h1:p1,h2:p2``;
    ``error(why)`` is raised when an item is not ``host:port`` (``what`` names the items)."""
    userinfo, _, hostlist = netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, sep, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if sep else None
    nodes: List[Tuple[str, int]] = []
    for item in hostlist.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise error(f"each {what} must be host:port, got {item.strip()!r}")
        nodes.append((host.strip("[]"), int(port)))
    return username, password, nodes


# -- redis+cluster:// ------------------------------------------------------------------------------
def _cluster_error(url: str, why: str) -> ValueError:
    return ValueError(f"bad Redis Cluster URL {redact_url(url)!r}: {why}; the form is "
                      f"redis+cluster://[[user]:password@]host:port[,host:port...]/ "
                      f"(rediss+cluster:// for TLS)")


def parse_cluster_url(url: str) -> ClusterURL:
    """Split ``redis+cluster://[[user]:password@]h1:p1,h2:p2/``: a few nodes of the cluster
    to learn its layout from (any live one will do). Raises ``ValueError`` naming what is
    wrong."""
    parts = urlsplit(url)
    if parts.scheme not in (CLUSTER_SCHEME, CLUSTER_TLS_SCHEME):
        raise _cluster_error(url, f"the scheme must be {CLUSTER_SCHEME}:// or {CLUSTER_TLS_SCHEME}://")
    username, password, nodes = _userinfo_and_nodes(parts.netloc, "node", lambda why: _cluster_error(url, why))
    if parts.path.strip("/") not in ("", "0"):
        raise _cluster_error(url, f"a cluster has only database 0; the path must be / or empty, got {parts.path!r}")
    if parts.query and parse_qs(parts.query, keep_blank_values=True):
        raise _cluster_error(url, "it takes no query parameters (connection settings go in the YAML redis: "
                                  "section or connection_settings=)")
    return ClusterURL(nodes, username, password, parts.scheme == CLUSTER_TLS_SCHEME)


# -- redis+sentinel:// -----------------------------------------------------------------------------
def _sentinel_error(url: str, why: str) -> ValueError:
    return ValueError(
        f"bad Sentinel URL {redact_url(url)!r}: {why}; the form is "
        f"redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]"
        f"[?sentinel_password=...]")


def parse_sentinel_url(url: str) -> SentinelURL:
    """Split ``redis+sentinel://[[user]:password@]h1:p1,h2:p2/service_name[/db]``.

    The user and password (in the URL's user part) are the data nodes'; the sentinels'
    own, when they need one, go in the ``sentinel_username``/``sentinel_password`` query
    parameters. Raises ``ValueError`` naming what is wrong.
    """
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise _sentinel_error(url, f"the scheme must be {SENTINEL_SCHEME}://")
    username, password, sentinels = _userinfo_and_nodes(parts.netloc, "sentinel",
                                                        lambda why: _sentinel_error(url, why))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise _sentinel_error(url, "the service name (the sentinels' name of the primary) is missing")
    if len(path) > 2:
        raise _sentinel_error(url, f"the path must be /service_name or /service_name/db, got {parts.path!r}")
    query: Dict[str, List[str]] = parse_qs(parts.query, keep_blank_values=True)
    for key in query:
        if key not in SENTINEL_QUERY_KEYS:
            raise _sentinel_error(url, f"unknown query parameter {key!r} (known: {', '.join(SENTINEL_QUERY_KEYS)})")
    db_text = path[1] if len(path) == 2 else query.get("db", ["0"])[-1]
    if not db_text.isdigit():
        raise _sentinel_error(url, f"the database must be a number, got {db_text!r}")
    return SentinelURL(
        sentinels=sentinels, service=unquote(path[0]), db=int(db_text),
        username=username, password=password,
        sentinel_username=query.get("sentinel_username", [None])[-1] or None,
        sentinel_password=query.get("sentinel_password", [None])[-1] or None,
    )

"""Which headers a reverse proxy passes on: everything but the hop-by-hop ones (RFC 9110, section 7.6.1).

Hop-by-hop headers describe one connection (its keep-alive, its framing, its upgrade), so each hop
writes its own; a header that the ``Connection`` header names is hop-by-hop for that message too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["HOP_BY_HOP_HEADERS", "request_headers", "response_headers"]

RawHeaders = list[tuple[bytes, bytes]]

HOP_BY_HOP_HEADERS: Final = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}
)
"""Header names (lower case) never forwarded in either direction, besides every ``Proxy-*`` header."""

_HOP_BY_HOP_BYTES: Final = frozenset(name.encode("ascii") for name in HOP_BY_HOP_HEADERS)
# Host comes from the upstream URL; Content-Length from the buffered body; Expect was answered by
# the front server, which already read the whole body.
_REQUEST_ONLY: Final = frozenset({b"host", b"content-length", b"expect"})
# The front server writes its own Date and Server; copying the upstream's would send both twice.
_RESPONSE_ONLY: Final = frozenset({b"date", b"server"})


def request_headers(raw: Iterable[tuple[bytes, bytes]], extra: Mapping[str, str] | None = None) -> RawHeaders:
    """Return the headers to send upstream: the client's minus hop-by-hop ones, then ``extra``.

    A header in ``extra`` replaces every client header of the same name (compared case-insensitively),
    so an upstream credential such as a per-instance bearer key overrides the caller's Authorization.
    """
    added = [(name.lower().encode("ascii"), value.encode("latin-1")) for name, value in (extra or {}).items()]
    replaced = {name for name, _ in added}
    kept = _end_to_end(raw, _REQUEST_ONLY | replaced)
    return kept + added


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> RawHeaders:
    """Return the upstream's response headers the client should see, names in lower case as ASGI wants."""
    return _end_to_end(raw, _RESPONSE_ONLY)


def _end_to_end(raw: Iterable[tuple[bytes, bytes]], also_dropped: frozenset[bytes]) -> RawHeaders:
    pairs = [(name.lower(), value) for name, value in raw]
    named_by_connection = {
        token.strip().lower() for name, value in pairs if name == b"connection" for token in value.split(b",")
    }
    dropped = _HOP_BY_HOP_BYTES | named_by_connection | also_dropped
    return [(name, value) for name, value in pairs if name not in dropped and not name.startswith(b"proxy-")]

"""Which request paths the proxy forwards: only those that cannot leave the upstream's ``v1/`` prefix.

A client names the endpoint by its path, and the proxy appends that path to an upstream base such as
the agent's ``…/proxy/{id}/``. A dot segment (``..``, also percent-encoded as ``%2e%2e``), an encoded
slash or a backslash could make the joined URL resolve outside that prefix, to another route of the
agent or of the model server, reached with the master's own credentials. No OpenAI endpoint has such a
path, so they are refused rather than cleaned up: there is nothing legitimate to preserve.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final
from urllib.parse import unquote

from starlette.requests import Request

from .exceptions import UnsafeProxyPathError

__all__ = ["check_proxy_path", "checked_path_param"]

# %2F and %5C: a slash or backslash that the router would decode and then send as a real separator.
_ENCODED_SEPARATOR: Final = re.compile(r"%(2f|5c)", re.IGNORECASE)
_DOT_SEGMENTS: Final = frozenset({".", ".."})
# Each layer of percent-encoding is one more hop that may decode it (the router, the agent, the model
# server); more layers than that is not a path any client means.
_MAX_DECODINGS: Final = 3


def check_proxy_path(path: str, *, max_decodings: int = _MAX_DECODINGS) -> str:
    """Return ``path`` percent-decoded, or refuse it when it could step out of the proxy's prefix.

    ``path`` is the path as it came on the wire (the ASGI ``raw_path``, still percent-encoded), whole or
    below the proxy's prefix: the server's decoded ``path`` has already turned ``%2F`` into ``/`` and
    hides an encoded slash. The path is checked as received, after each percent-decoding (so a
    double-encoded ``%252e%252e`` counts); a character that Unicode NFKC normalization changes is
    refused at every layer (fullwidth dots, U+FF0E, become ``..`` on servers that normalize).

    Args:
        path: the raw path.
        max_decodings: how many layers of percent-encoding may be decoded (one per hop that may
            decode it: the router, the agent, the model server; a hop further in allows one fewer).

    Raises:
        UnsafeProxyPathError: the path has a ``.`` or ``..`` segment, a backslash, a control
            character, a character NFKC normalization changes, an encoded slash or backslash, or
            more layers of percent-encoding than any hop would decode.
    """
    layers = [path]
    while (decoded := unquote(layers[-1])) != layers[-1]:
        if len(layers) > max_decodings:
            raise UnsafeProxyPathError(path, "too many layers of percent-encoding")
        layers.append(decoded)
    for layer in layers:
        if unicodedata.normalize("NFKC", layer) != layer:
            # Fullwidth dots and solidi become "." and "/" on a server that normalizes; no API path
            # needs a character that normalization changes, so none is forwarded.
            raise UnsafeProxyPathError(path, "a character that Unicode normalization changes")
        reason = _unsafe(layer)
        if reason is not None:
            raise UnsafeProxyPathError(path, reason)
    return layers[1] if len(layers) > 1 else path


def checked_path_param(request: Request, name: str = "path") -> str:
    """The route's path parameter ``name``, once :func:`check_proxy_path` accepts the raw request path.

    For a Starlette route such as ``/{path:path}``: the parameter is decoded, so the check runs on the
    request's ``raw_path`` (or its ``path`` where the server gives no raw one).

    Raises:
        UnsafeProxyPathError: as :func:`check_proxy_path`.
    """
    raw = request.scope.get("raw_path")
    check_proxy_path(raw.decode("latin-1") if isinstance(raw, bytes) else request.scope["path"])
    value: str = request.path_params[name]
    check_proxy_path(value)  # a route parameter that does not come from the path is checked too
    return value


def _unsafe(path: str) -> str | None:
    if "\\" in path:
        return "a backslash"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        return "a control character"
    if _ENCODED_SEPARATOR.search(path):
        return "an encoded slash or backslash"
    if any(segment in _DOT_SEGMENTS for segment in path.split("/")):
        return "a '.' or '..' segment"
    return None

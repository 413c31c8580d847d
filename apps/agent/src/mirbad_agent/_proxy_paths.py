"""Which paths the agent's proxy forwards: only plain paths under the model server's ``/v1/``.

A path below ``/agent/v1/proxy/{model_id}/`` reaches the model's own server, which must not become a
way to its other endpoints (llama-server's ``/props`` or ``/slots``) or, through a server that
normalizes dot segments, back to the agent's own routes. So a path is refused when, at any layer of
percent-decoding (the raw bytes on the wire, the once-decoded path Starlette routes on, and any
further layer a server behind us might decode), it holds a character that Unicode compatibility
normalization changes, a ``.`` or ``..`` segment, a backslash, a control character or a slash that was
encoded; and it must start with ``v1/``. What passes is forwarded as the once-decoded path, which
:func:`mirbad_router.join_upstream_url` encodes again. The rule itself is the router's.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

from starlette.requests import Request

from mirbad_router import UnsafeProxyPathError, check_proxy_path

from .exceptions import ProxyPathError

__all__ = ["FORWARDED_PREFIX", "checked_path", "raw_tail"]

_MAX_DECODINGS: Final = 2

FORWARDED_PREFIX: Final = "v1/"
"""Every forwarded path starts with this (the OpenAI-compatible API of the model's server)."""


def checked_path(raw: str) -> str:
    """The path to forward for the still-encoded path ``raw`` below the proxy route.

    The router's rule (:func:`mirbad_router.check_proxy_path`, the same one the master applies to
    ``/v1``), plus the agent's own: only the model server's ``v1/`` API is reachable.

    Args:
        raw: the path after ``/proxy/{model_id}/`` as it came on the wire (``v1/chat/completions``).

    Returns:
        ``raw`` decoded once (what the route's ``{path}`` holds), safe to join under the server's base.

    Raises:
        ProxyPathError: a dot segment, backslash, control character or encoded slash at any decoding
            layer, a character normalization changes, too many encoding layers, or a path outside ``v1/``.
    """
    try:
        # The master's router decoded one layer already: the agent allows one fewer than it does.
        forwarded = check_proxy_path(raw, max_decodings=_MAX_DECODINGS)
    except UnsafeProxyPathError as exc:
        raise ProxyPathError(raw, f"it has {exc.reason}") from None
    if not forwarded.startswith(FORWARDED_PREFIX):
        raise ProxyPathError(raw, f"only paths under /{FORWARDED_PREFIX} are forwarded")
    return forwarded


def raw_tail(request: Request) -> str:
    """The still-encoded path below ``/proxy/{model_id}/`` of a request on the proxy route.

    Read from the ASGI ``raw_path`` (the bytes the client sent) when the server gives one, since the
    routed path is already decoded and has lost which slashes were ``%2F``.

    Raises:
        ProxyPathError: the raw path has a different number of slashes than the decoded one (a slash
            was encoded somewhere, the model id included).
    """
    decoded: str = request.scope["path"]
    raw_bytes: bytes | None = request.scope.get("raw_path")
    raw = raw_bytes.decode("latin-1").partition("?")[0] if raw_bytes else quote(decoded, safe="/")
    tail: str = request.path_params["path"]
    if raw.count("/") != decoded.count("/"):
        raise ProxyPathError(tail, "an encoded slash is not forwarded")
    return "/".join(raw.split("/")[-(tail.count("/") + 1) :])

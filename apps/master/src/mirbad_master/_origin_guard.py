"""Cross-site request forgery: what the portal's session cookie may do when another site asks.

SameSite=Strict keeps the cookie off requests from other *sites*, but every port of one host is the
same site: a page on ``127.0.0.1:19091`` could make the browser stop a model on ``127.0.0.1:8080``
with the administrator's cookie. So the master checks where a browser request comes from:

* a state-changing ``/api`` call (POST, PUT, PATCH, DELETE) authenticated by the session cookie, and
  the portal's ``POST /login`` and ``POST /logout``, must carry an ``Origin`` (or, lacking it, a
  ``Referer``) of the master's own origin (the scheme and ``Host`` the request came to); one with
  neither is refused too, since every browser sends ``Origin`` on such requests;
* the portal's websocket (NiceGUI's socket.io at ``/_nicegui_ws/``, handshake and long polling) is
  refused for a foreign ``Origin``.

Calls with ``Authorization: Bearer`` are left alone: a page of another origin cannot set that header
without a CORS preflight the master never grants, so scripts keep working without an ``Origin``.
Refusals are 403 ``cross_origin`` in the admin API's envelope; a websocket is closed before it opens.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from mirbad_protocol.admin import AdminErrorCode

from ._admin_auth import SESSION_COOKIE
from ._api_errors import error_response

__all__ = ["OriginGuard", "same_origin"]

_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_PORTAL_FORMS: Final = ("/login", "/logout")
_PORTAL_SOCKET: Final = "/_nicegui_ws/"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_WEB_SCHEMES: Final = {"ws": "http", "wss": "https"}
_POLICY_VIOLATION: Final = 1008
_NETLOC: Final = re.compile(r"(?P<host>\[[0-9a-f:.]+\]|[a-z0-9._~%-]+)(?::(?P<port>[0-9]{1,5}))?")


def same_origin(url: str, scheme: str, host: str) -> bool:
    """Whether ``url`` (an ``Origin`` or ``Referer``) has the origin ``scheme://host`` (the request's)."""
    given = _origin_of(url)
    return given is not None and given == _origin_of(f"{scheme}://{host}")


def _origin_of(url: str) -> tuple[str, str, int | None] | None:
    """``(scheme, host, port)`` of ``url``, default ports filled in; ``None`` for anything unusual."""
    scheme, _, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].lower()
    # Exactly a host and a port: no user info, nothing that urllib would read leniently.
    match = _NETLOC.fullmatch(netloc)
    if match is None or not scheme.isascii() or not scheme.isalpha():
        return None
    scheme = scheme.lower()
    port = int(match["port"]) if match["port"] else _DEFAULT_PORTS.get(scheme)
    if port is not None and not 0 < port < 65536:
        return None
    return scheme, match["host"], port


class OriginGuard:
    """ASGI middleware refusing cross-origin uses of the session cookie (see the module's rules).

    Args:
        app: the master's app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it when it comes from another origin."""
        if scope["type"] == "http" and _refused_http(scope):
            answer = error_response(
                403,
                AdminErrorCode.CROSS_ORIGIN,
                "refused: this request comes from another origin (or names none); scripts send "
                "'Authorization: Bearer <administrator password>' instead of the session cookie",
            )
            await answer(scope, receive, send)
            return
        if scope["type"] == "websocket" and _refused_socket(scope):
            await send({"type": "websocket.close", "code": _POLICY_VIOLATION})
            return
        await self._app(scope, receive, send)


def _refused_http(scope: Scope) -> bool:
    path: str = scope["path"]
    if path.startswith(_PORTAL_SOCKET):
        return _foreign(Headers(scope=scope), scope, required=False)
    if scope["method"] in _SAFE_METHODS:
        return False
    if path in _PORTAL_FORMS:
        return _foreign(Headers(scope=scope), scope, required=True)
    if not path.startswith("/api/"):
        return False
    headers = Headers(scope=scope)
    if "authorization" in headers or SESSION_COOKIE not in headers.get("cookie", ""):
        return False  # Bearer (or nothing: the route refuses it with 401)
    return _foreign(headers, scope, required=True)


def _refused_socket(scope: Scope) -> bool:
    path: str = scope["path"]
    return path.startswith(_PORTAL_SOCKET) and _foreign(Headers(scope=scope), scope, required=False)


def _foreign(headers: Headers, scope: Scope, *, required: bool) -> bool:
    """Whether the request names another origin; with ``required``, also when it names none."""
    claimed = headers.get("origin") or headers.get("referer")
    if claimed is None:
        return required
    raw = str(scope["scheme"])
    scheme = _WEB_SCHEMES.get(raw, raw)
    return not same_origin(claimed, scheme, headers.get("host", ""))

"""The exceptions of mirbad_router.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    MirbadRouterError(MirbadError)
    ├── RequestTooLargeError
    ├── StartDeferredError
    ├── UpstreamError
    │   ├── UpstreamConnectError
    │   ├── UpstreamTimeoutError
    │   └── UpstreamResponseError
    ├── InvalidRequestBodyError(MirbadRouterError, ValueError)
    └── UnsafeProxyPathError(MirbadRouterError, ValueError)

The forwarding core raises these before a response has started, so the embedding app (the master's
router, the agent's proxy) can answer with its own error shape and status: it owns the HTTP mapping.
"""

from __future__ import annotations

from mirbad_protocol import MirbadError

__all__ = [
    "MirbadRouterError",
    "RequestTooLargeError",
    "StartDeferredError",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamResponseError",
    "UpstreamTimeoutError",
]


class MirbadRouterError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_router`."""


class RequestTooLargeError(MirbadRouterError):
    """A request body over the proxy's limit; answer 413 ``request_too_large``.

    Attributes:
        limit: the most bytes a body may have.
        declared: the Content-Length the client announced, or ``None`` when the body was chunked and
            the limit was crossed while reading it.
    """

    def __init__(self, limit: int, declared: int | None = None) -> None:
        said = f" (Content-Length {declared})" if declared is not None else ""
        super().__init__(f"the request body is larger than {limit} bytes{said}")
        self.limit = limit
        self.declared = declared


class StartDeferredError(MirbadRouterError):
    """A resolver's start on request cannot happen yet but will later: answer 503 with ``Retry-After``.

    Raised by :meth:`~mirbad_router.ModelResolver.start_on_request` (the model's executable is still
    being installed, say); the client is told to retry as for a model still starting, not that the
    start failed. The message says why, for people.
    """


class UpstreamError(MirbadRouterError):
    """The upstream gave no usable response; nothing has been sent to the client yet.

    Attributes:
        url: the upstream URL the request was for.
        reason: what went wrong, in words.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{self._summary} {url}: {reason}")
        self.url = url
        self.reason = reason

    _summary = "upstream failed at"

    @property
    def without_url(self) -> str:
        """The message without the upstream's URL, for a caller who must not learn where it listens."""
        return f"{self._summary.removesuffix(' at')}: {self.reason}"


class UpstreamConnectError(UpstreamError):
    """No connection to the upstream (refused, unresolvable, TLS refused, or no answer within 10 s)."""

    _summary = "cannot connect to upstream"


class UpstreamTimeoutError(UpstreamError):
    """The upstream stayed silent for longer than the idle timeout before sending its response headers."""

    _summary = "upstream stayed silent at"


class UpstreamResponseError(UpstreamError):
    """The upstream accepted the connection but closed it or broke HTTP before its response headers."""

    _summary = "upstream sent no usable response at"


# Appended by the router app; listed here to leave the forwarding core's list above untouched.
__all__ += ["InvalidRequestBodyError"]


class InvalidRequestBodyError(MirbadRouterError, ValueError):
    """A /v1 request body the router cannot read its ``model`` from; answer 400.

    It is neither valid JSON nor valid multipart/form-data, or it holds text no model server can take
    (the message says which and why).

    Attributes:
        param: the body field at fault (``model``, ``messages[0].content``), when one is.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


__all__ += ["UnsafeProxyPathError"]


class UnsafeProxyPathError(MirbadRouterError, ValueError):
    """A request path that could resolve outside the proxy's upstream prefix; answer 400, never forward.

    Attributes:
        path: the path as received.
        reason: what in it is refused.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"the request path has {reason}")
        self.path = path
        self.reason = reason

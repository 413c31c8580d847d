"""mirbad_router: the embeddable OpenAI-compatible /v1 proxy of Mirbad, as a Starlette app.

:func:`create_router_app` builds the router over four contracts its host provides (a
:class:`ModelResolver`, a :class:`KeyStore`, a :class:`MaintenanceGate` and a :class:`StatsSink`), to be
mounted at ``/v1`` by any ASGI application. The streaming reverse-proxy core beneath it
(:func:`forward`, :func:`read_body`) is shared with the agent's model proxy. In-memory fakes of the
contracts live in :mod:`mirbad_router.testing`. :class:`GuardedConfig` serves it (or any ASGI app) with
uvicorn behind header and body timeouts and a connection limit, as the master and the agent do.
"""

from ._accept_errors import AcceptErrorLog, install_accept_error_log
from ._app import create_router_app
from ._body import RequestBody, parse_request_body
from ._bounds import fit_output_to, request_token_bound, request_token_floor
from ._connections import (
    ACCEPT_BURST,
    LISTEN_QUEUE,
    ConnectionLimits,
    GuardedConfig,
    GuardedHttpProtocol,
    GuardedServer,
    default_max_connections,
)
from ._contracts import (
    KeyGrant,
    KeyStore,
    MaintenanceGate,
    MaintenanceNotice,
    ModelResolver,
    Resolution,
    RoutedModel,
    StatsSink,
    Upstream,
)
from ._errors import NOT_READY_RETRY_AFTER_S
from ._event_loop import fast_backend_options, run_event_loop
from ._forward import (
    CONNECT_TIMEOUT_S,
    MAX_BODY_BYTES,
    UPSTREAM_KEEPALIVE_S,
    create_upstream_client,
    forward,
    join_upstream_url,
    read_body,
)
from ._headers import HOP_BY_HOP_HEADERS, request_headers, response_headers
from ._limits import LimitExceeded, RateLimiter, TokenReservation
from ._network import AsyncioNetworkBackend
from ._paths import check_proxy_path, checked_path_param
from ._pool import SWEEP_INTERVAL_S, ForwardingClient, LeanConnectionPool, LeanTransport, lean_transport
from ._prompt_scale import PromptScale
from ._relay import CLIENT_CLOSED_REQUEST, UpstreamAnswer, UpstreamRelay, wait_for_disconnect
from ._stats import RouterStats
from ._usage import JsonUsageTap, SseUsageTap, Usage, request_stream_usage, usage_from_object
from .exceptions import (
    InvalidRequestBodyError,
    MirbadRouterError,
    RequestTooLargeError,
    StartDeferredError,
    UnsafeProxyPathError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamResponseError,
    UpstreamTimeoutError,
)

__all__ = [
    "ACCEPT_BURST",
    "CLIENT_CLOSED_REQUEST",
    "CONNECT_TIMEOUT_S",
    "HOP_BY_HOP_HEADERS",
    "LISTEN_QUEUE",
    "MAX_BODY_BYTES",
    "NOT_READY_RETRY_AFTER_S",
    "SWEEP_INTERVAL_S",
    "UPSTREAM_KEEPALIVE_S",
    "AcceptErrorLog",
    "AsyncioNetworkBackend",
    "ConnectionLimits",
    "ForwardingClient",
    "GuardedConfig",
    "GuardedHttpProtocol",
    "GuardedServer",
    "InvalidRequestBodyError",
    "JsonUsageTap",
    "KeyGrant",
    "KeyStore",
    "LeanConnectionPool",
    "LeanTransport",
    "LimitExceeded",
    "MaintenanceGate",
    "MaintenanceNotice",
    "MirbadRouterError",
    "ModelResolver",
    "PromptScale",
    "RateLimiter",
    "RequestBody",
    "RequestTooLargeError",
    "Resolution",
    "RoutedModel",
    "RouterStats",
    "SseUsageTap",
    "StartDeferredError",
    "StatsSink",
    "TokenReservation",
    "UnsafeProxyPathError",
    "Upstream",
    "UpstreamAnswer",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamRelay",
    "UpstreamResponseError",
    "UpstreamTimeoutError",
    "Usage",
    "check_proxy_path",
    "checked_path_param",
    "create_router_app",
    "create_upstream_client",
    "default_max_connections",
    "fast_backend_options",
    "fit_output_to",
    "forward",
    "install_accept_error_log",
    "join_upstream_url",
    "lean_transport",
    "parse_request_body",
    "read_body",
    "request_headers",
    "request_stream_usage",
    "request_token_bound",
    "request_token_floor",
    "response_headers",
    "run_event_loop",
    "usage_from_object",
    "wait_for_disconnect",
]

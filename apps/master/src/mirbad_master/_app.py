"""The master's one ASGI application: portal, ``/api``, ``/v1``, ``/healthz`` and ``/metrics`` on one port.

It is a FastAPI app, so ``/openapi.json`` documents ``/api`` (interactive docs at ``/api/docs``). The
router is mounted at ``/v1``. The portal (NiceGUI, itself built on FastAPI) is attached last by a
``ui`` installer, e.g. one calling ``nicegui.ui.run_with(app)``: its catch-all mount at ``/`` must come
after every other route. NiceGUI is never imported here, so the API runs and is tested without it.
``/healthz`` and ``/metrics`` need no sign-in: they carry no secret and monitoring has no password; the
master listens on loopback unless told otherwise. :class:`OriginGuard` wraps everything: the session
cookie does nothing state-changing for a page of another origin (another port of this host included);
:class:`FrameGuard` outside it forbids every frame of the portal (clickjacking). Inside them,
:class:`SignInGate` refuses an unauthenticated ``/api`` write before its body is read, and
:class:`BodyCap` caps every body but ``/v1``'s (413).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from mirbad_protocol.admin import AdminErrorBody
from mirbad_router import create_router_app

from ._admin_auth import AdminAuth
from ._api import OWN_BODY_CAPS, api_fallback, api_router
from ._api_errors import install_error_handlers, refusals
from ._body_cap import BodyCap
from ._composition import MasterServices
from ._frame_guard import FrameGuard
from ._metrics import METRICS_MEDIA_TYPE, collect_metrics, render_metrics
from ._origin_guard import OriginGuard
from ._sign_in_gate import SignInGate
from .backup_share.actions import serve_backups

__all__ = ["UiInstaller", "create_master_app", "v1_first"]

UiInstaller = Callable[[FastAPI, MasterServices, AdminAuth], None]
"""Attaches the portal to the app, given the services and the sign-in (called once, after every route)."""

_LANDING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Mirbad</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>Mirbad</h1>
<p>The OpenAI-compatible endpoint is <code>/v1</code>; the admin API is <code>/api</code>
(<a href="/api/docs">interactive documentation</a>, <a href="/openapi.json">OpenAPI schema</a>).</p>
</body></html>
"""


def create_master_app(services: MasterServices, auth: AdminAuth, *, ui: UiInstaller | None = None) -> FastAPI:
    """Build the master's application over started (or about to start) ``services``.

    The app has no life cycle of its own: whoever serves it runs ``async with services`` around it.

    Args:
        services: the master's composition.
        auth: the administrator's password and sessions.
        ui: attaches the portal; without it ``/`` is a short page pointing at ``/v1`` and ``/api``.
    """
    app = FastAPI(
        title="Mirbad admin API",
        version=_version(),
        description="Models, nodes, API keys and the fleet's status. Sign in with "
        "`Authorization: Bearer <administrator password>` or the portal's session cookie.",
        openapi_url="/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    install_error_handlers(app)
    # The backups ask the destination's room (which the composition cannot import) before they write.
    serve_backups(services)
    # Innermost first: the body cap counts what the app reads; the sign-in gate refuses strangers
    # before anything of their body is read (FastAPI reads body parameters before the sign-in
    # dependency runs).
    app.add_middleware(BodyCap, max_bytes=services.settings.max_api_body_bytes, own_caps=OWN_BODY_CAPS)
    app.add_middleware(SignInGate, auth=auth)
    app.add_middleware(OriginGuard)
    # Outermost, so the origin guard's refusals and the error handlers' answers carry it too.
    app.add_middleware(FrameGuard)
    _document_refusals(app)
    app.include_router(api_router(services, auth), prefix="/api")
    app.router.routes.append(api_fallback(app))

    @app.get("/healthz", tags=["operations"], summary="Liveness (no sign-in)")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics (no sign-in)",
        response_class=PlainTextResponse,
    )
    async def metrics() -> Response:
        return Response(render_metrics(await collect_metrics(services)), media_type=METRICS_MEDIA_TYPE)

    router = create_router_app(
        services.resolver,
        services.key_gate,
        services.maintenance,
        services.stats,
        startup_timeout_s=services.settings.startup_timeout_s,
    )
    app.mount(_V1, router)
    if ui is not None:
        ui(app, services, auth)
    else:

        @app.get("/", include_in_schema=False)
        async def landing() -> Response:
            return HTMLResponse(_LANDING)

    return app


_V1: Final = "/v1"


def v1_first(app: FastAPI) -> ASGIApp:
    """The master's ASGI entry: ``/v1/…`` goes straight to the router's mount, the rest to ``app``.

    The router is a Starlette app of its own with its own error handling; FastAPI's layers in front of
    it (its error and exception middleware, the origin guard, which leaves ``/v1`` alone, the match
    against every ``/api`` route before the mount) did nothing for a ``/v1`` request but cost time on
    it and on each streamed event, which passed through every layer's ``send``.
    """
    mount = next(route for route in app.routes if isinstance(route, Mount) and route.path == _V1)

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(_V1 + "/"):
            await mount(scope, receive, send)
        else:
            await app(scope, receive, send)

    return dispatch


# FastAPI documents a 422 with its own error list on every route with parameters; ours answer those
# with 400 in the envelope (see _api_errors), so the document says that instead.
_FASTAPI_422: Final = "#/components/schemas/HTTPValidationError"


def _document_refusals(app: FastAPI) -> None:
    """Make ``/openapi.json`` list what every ``/api`` route really refuses with, in the envelope.

    Every route: 401 and 429 (sign-in); with parameters or a body: 400; with a path id: 404; with a
    body: 413 (:class:`BodyCap`). A
    route's own refusals (409, 422, 5xx of a node) are declared on the route.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            for path, methods in document.get("paths", {}).items():
                if path.startswith("/api"):
                    for method, operation in methods.items():
                        _add_refusals(method, path, operation)
            schemas = document.get("components", {}).get("schemas", {})
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            for schema in schemas.values():
                # Bodies refuse unknown fields (user input) and answers carry none; free-form objects
                # (speculative, maps) say otherwise themselves.
                if "properties" in schema:
                    schema.setdefault("additionalProperties", False)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise it


def _add_refusals(method: str, path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    fastapi_422 = responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if fastapi_422.get("$ref") == _FASTAPI_422:
        del responses["422"]
    if (method, path) == ("delete", "/api/session"):
        return  # signing out needs no sign-in and always succeeds
    statuses = [401, 429]
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.append(400)
    if "{" in path:
        statuses.append(404)
    if operation.get("requestBody"):
        statuses.append(413)  # BodyCap
    for status, response in refusals(*statuses).items():
        documented = {key: value for key, value in response.items() if key != "model"}
        documented["content"] = {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{AdminErrorBody.__name__}"}}
        }
        responses.setdefault(str(status), documented)


def _version() -> str:
    try:
        return version("mirbad-master")
    except PackageNotFoundError:
        return "0.0.0"

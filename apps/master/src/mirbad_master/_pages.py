"""Attach the portal to the master's app: the session routes, every room's pages, then NiceGUI itself.

It sits beside the rooms rather than in ``ui/``: the rooms' pages build on ``ui/``'s shared pieces, so
the one module that gathers every page cannot live in the package those pieces come from.

NiceGUI keeps its pages in one process-wide app, so a process installs one portal. Its catch-all mount
at ``/`` must come after every other route of the master (``/api``, ``/v1``, ``/healthz``), which is why
:func:`install_ui` is the last thing the composition calls.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from nicegui import app as nicegui_app
from nicegui import background_tasks, ui

from ._admin_auth import AdminAuth
from ._composition import MasterServices
from .audit.actions import AuditFilters
from .audit.page import render_audit
from .backups.page import render_backups_page
from .benchmarks.page import render_benchmarks
from .keys.page import render_keys
from .models.page import render_model_editor, render_models
from .nodes.page import render_nodes
from .releases.page import render_releases
from .services.page import render_services
from .tuning.page import render_tuning
from .ui._fleet import parse_tags
from .ui._guarded_page import guarded_page
from .ui._layout import is_dark
from .ui._login import render_login
from .ui._logs import render_logs
from .ui._overview import render_overview
from .ui._playground import render_playground
from .ui._portal import Portal
from .ui._session import LOGIN_PATH, install_session_routes, safe_next, signed_in

__all__ = ["HISTORY_INTERVAL_S", "install_portal", "install_ui"]

HISTORY_INTERVAL_S: Final = 5.0
"""How often the memory history samples the node monitor's cache."""

_installed = False


def install_ui(app: FastAPI, services: MasterServices, auth: AdminAuth) -> Portal:
    """Serve the portal from ``app``; call it once per process, after every other route is added.

    Returns:
        The portal's shared state (tests read its memory history).

    Raises:
        RuntimeError: a portal was installed in this process already.
    """
    global _installed  # NiceGUI's pages are process-wide: a second portal would shadow the first
    if _installed:
        raise RuntimeError("the portal is installed once per process")
    _installed = True
    portal = Portal(services, auth)
    install_session_routes(app, auth)
    _pages(portal)
    nicegui_app.on_startup(
        lambda: background_tasks.create(portal.history.run(services.cache, HISTORY_INTERVAL_S), name="memory")
    )
    ui.run_with(
        app,
        title="Mirbad",
        favicon="🪐",
        show_welcome_message=False,
        reconnect_timeout=10.0,
    )
    return portal


def install_portal(app: FastAPI, services: MasterServices, auth: AdminAuth) -> None:
    """:func:`install_ui` in the shape of the master's ``UiInstaller`` hook (what ``mirbad up`` looks up)."""
    install_ui(app, services, auth)


def _pages(portal: Portal) -> None:
    @ui.page(LOGIN_PATH)
    async def login(
        request: Request, error: str | None = None, retry: str | None = None, next: str | None = None
    ) -> Response | None:
        if await signed_in(request, portal.auth):
            return RedirectResponse(safe_next(next), status_code=303)
        render_login(request, error, retry, next)
        return None

    @guarded_page(portal, "/", section="/")
    async def overview(request: Request) -> None:
        await render_overview(portal, dark=is_dark(request))

    @guarded_page(portal, "/models", section="/models")
    async def models(request: Request, tags: str = "", focus: str = "") -> None:
        await render_models(portal, parse_tags(tags), focus or None)

    @guarded_page(portal, "/models/new", section="/models")
    async def new_model(request: Request) -> None:
        await render_model_editor(portal, None)

    @guarded_page(portal, "/models/{model_id}/edit", section="/models")
    async def edit_model(request: Request, model_id: str, tags: str = "") -> None:
        await render_model_editor(portal, model_id, parse_tags(tags))

    @guarded_page(portal, "/models/{model_id}/logs", section="/models")
    async def model_logs(request: Request, model_id: str) -> None:
        await render_logs(portal, model_id)

    @guarded_page(portal, "/models/{model_id}/benchmarks", section="/models")
    async def model_benchmarks(request: Request, model_id: str) -> None:
        await render_benchmarks(portal, model_id)

    @guarded_page(portal, "/models/{model_id}/tuning", section="/models")
    async def model_tuning(request: Request, model_id: str) -> None:
        await render_tuning(portal, model_id)

    @guarded_page(portal, "/playground", section="/playground")
    async def playground(request: Request) -> None:
        await render_playground(portal)

    @guarded_page(portal, "/access", section="/access")
    async def access(request: Request) -> None:
        await render_keys(portal, request)

    @guarded_page(portal, "/nodes", section="/nodes")
    async def nodes(request: Request) -> None:
        await render_nodes(portal)

    @guarded_page(portal, "/services", section="/services")
    async def host_services(request: Request) -> None:
        await render_services(portal)

    @guarded_page(portal, "/releases", section="/releases")
    async def releases(request: Request) -> None:
        await render_releases(portal)

    @guarded_page(portal, "/backup", section="/backup")
    async def backup(request: Request) -> None:
        await render_backups_page(portal)

    @guarded_page(portal, "/audit", section="/audit")
    async def audit(
        request: Request,
        actor: str = "",
        action: str = "",
        subject: str = "",
        since: str = "",
        until: str = "",
    ) -> None:
        filters = AuditFilters(actor=actor, action=action, subject=subject, since=since, until=until)
        await render_audit(portal, filters)

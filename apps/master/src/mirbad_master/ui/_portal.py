"""The portal's shared state: the services, the sign-in, the memory history and the Playground's router."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response
from starlette.types import ASGIApp

from mirbad_master._admin_auth import AdminAuth
from mirbad_master._composition import MasterServices
from mirbad_router import create_router_app

from ._chat import PortalKeys
from ._memory_history import MemoryHistory
from ._session import login_redirect, signed_in

__all__ = ["Portal"]


@dataclass
class Portal:
    """What every page of one master's portal works with.

    Attributes:
        services: the master's composition, called in-process.
        auth: the administrator's password and sessions.
        history: the fleet's memory over the last hour.
        chat_router: a ``/v1`` router over the master's resolver, maintenance gate and counters that
            needs no API key (the Playground is signed in already); see :mod:`._chat`.
    """

    services: MasterServices
    auth: AdminAuth
    history: MemoryHistory = field(default_factory=MemoryHistory)
    chat_router: ASGIApp | None = None

    def __post_init__(self) -> None:
        if self.chat_router is None:
            self.chat_router = create_router_app(
                self.services.resolver,
                PortalKeys(),
                self.services.maintenance,
                self.services.stats,
                startup_timeout_s=self.services.settings.startup_timeout_s,
            )

    @property
    def router(self) -> ASGIApp:
        """The Playground's router."""
        assert self.chat_router is not None  # set in __post_init__
        return self.chat_router

    async def guard(self, request: Request) -> Response | None:
        """None for a signed-in request, else the redirect to the login page."""
        return None if await signed_in(request, self.auth) else login_redirect(request)

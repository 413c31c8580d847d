"""The agent's Starlette application: the contract's routes under ``/agent/v1`` and the background work.

The lifespan starts one task group: adoption of what a previous agent left running, the executable
catalogue's first check, the telemetry loop, the download jobs (resuming unfinished ones), the
image pulls and the hostd probe behind the ``host.services`` flag. None of it delays the listener
(the port opens at once) and all of it is cancelled when the server stops; the models keep running and
an unfinished download resumes at the next start (an unfinished image pull does not).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount

from mirbad_protocol import MirbadError, ModelState
from mirbad_protocol.agent import AGENT_API_PREFIX

from ._composition import AgentServices
from ._downloads import download_routes
from ._errors import handle_exception
from ._fence import FenceGuard, fence_routes
from ._host_services import container_service_routes, host_service_routes
from ._proxy import ModelServer, proxy_route
from ._releases import release_routes
from ._routes_models import model_routes
from ._routes_node import node_routes

__all__ = ["create_app"]

logger = logging.getLogger(__name__)


def create_app(services: AgentServices, *, background: bool = True) -> Starlette:
    """Build the agent's ASGI application over ``services`` (which the caller closes).

    Args:
        services: the agent's parts.
        background: run adoption, the catalogue check and the telemetry loop in the lifespan (tests of
            single routes turn it off and drive :class:`~mirbad_agent.TelemetryCollector` themselves).
    """
    routes: list[BaseRoute] = [
        *model_routes(services),
        *node_routes(services),
        *download_routes(services),
        *release_routes(services),
        *host_service_routes(services.host_services),
        *container_service_routes(services.host_containers),
        *fence_routes(services.fence),
        proxy_route(
            _upstream_lookup(services),
            services.proxy_client,
            idle_timeout_s=services.proxy_idle_timeout_s,
            running=_running_check(services),
        ),
    ]
    handlers = {HTTPException: handle_exception, MirbadError: handle_exception, Exception: handle_exception}
    # Outermost of the app's own layers: a fenced command is refused before any route reads its body.
    fence = [Middleware(FenceGuard, fence=services.fence)] if services.fence is not None else []
    return Starlette(
        routes=[Mount(AGENT_API_PREFIX, routes=routes)],
        middleware=fence,
        exception_handlers=handlers,
        lifespan=_lifespan(services) if background else None,
    )


def _upstream_lookup(services: AgentServices) -> Callable[[str], Awaitable[ModelServer | None]]:
    async def lookup(model_id: str) -> ModelServer | None:
        # A model without an instance raises ModelNotFoundError, which the proxy answers with 404.
        url, headers = await services.runtimes.upstream(model_id)
        return ModelServer(url, headers)

    return lookup


def _running_check(services: AgentServices) -> Callable[[str], Awaitable[bool]]:
    # Asked only when the model's server refused the connection: an exited container or a Failed
    # process still has an address, and the truth is a model that is not running (503), not a 502.
    async def running(model_id: str) -> bool:
        return (await services.runtimes.status(model_id)).state is ModelState.READY

    return running


def _lifespan(services: AgentServices) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            group.start_soon(_adopt, services)
            if services.catalog is not None:
                group.start_soon(services.catalog.verify_all)
            group.start_soon(services.telemetry.run, services.telemetry_interval_s)
            if services.downloads is not None:
                await group.start(services.downloads.run)
            if services.host_services is not None:
                group.start_soon(services.host_services.run)
            if services.images is not None:
                await group.start(services.images.run)
            yield
            group.cancel_scope.cancel()

    return lifespan


async def _adopt(services: AgentServices) -> None:
    try:
        adopted = await services.runtimes.adopt()
    except Exception:
        # Adoption only reports: drivers derive every state on read, so the agent serves on regardless.
        logger.exception("adopting the running models failed")
        return
    logger.info(
        "adopted %d model(s)%s",
        len(adopted),
        "".join(f"; {status.id}: {status.state}" for status in adopted),
    )

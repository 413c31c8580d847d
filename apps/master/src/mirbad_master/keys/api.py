"""``/api/keys``: the API keys of ``/v1``, their usage and whether a key is required at all.

A new key's secret is in the answer of ``POST /api/keys`` and nowhere else, ever: only its SHA-256 is
stored. Revoking keeps the key's record and usage; deleting removes both.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals, user_input
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._views import dump
from mirbad_protocol import WireModel
from mirbad_protocol.admin import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, KeyUsage

from . import actions

__all__ = ["KeySettings", "keys_router"]


class KeySettings(WireModel):
    """Whether ``/v1`` requests must carry a key (on once the first key exists)."""

    require_keys: bool


_KeyCreate = Annotated[ApiKeyCreate, user_input(ApiKeyCreate)]
_KeySettings = Annotated[KeySettings, user_input(KeySettings)]


def keys_router(services: MasterServices) -> APIRouter:
    """The routes under ``/keys`` over ``services``."""
    router = APIRouter(prefix="/keys", tags=["keys"])
    store = services.keys

    @router.get("", response_model=list[ApiKeyInfo], summary="List the keys (never their secrets)")
    async def list_keys() -> Response:
        return JSONResponse([dump(info) for info in await store.list()])

    @router.post(
        "",
        status_code=201,
        response_model=ApiKeyCreated,
        summary="Create a key (secret shown once)",
        responses=refusals(507),
    )
    async def create_key(body: _KeyCreate, request: Request) -> Response:
        created = await actions.create_key(services, body, actor_of(request))
        return JSONResponse(dump(created), status_code=201)

    @router.get(
        "/usage",
        response_model=list[KeyUsage],
        summary="Tokens and requests per key and model",
        responses=refusals(404),  # ?keyId= naming no key
    )
    async def key_usage(key_id: Annotated[str | None, Query(alias="keyId")] = None) -> Response:
        return JSONResponse([dump(usage) for usage in await store.usage(key_id)])

    @router.get("/settings", response_model=KeySettings, summary="Whether /v1 requires a key")
    async def get_settings() -> Response:
        return JSONResponse(dump(KeySettings(require_keys=await store.keys_required())))

    @router.put(
        "/settings", response_model=KeySettings, summary="Require a key on /v1, or stop requiring one"
    )
    async def put_settings(body: _KeySettings, request: Request) -> Response:
        await actions.set_keys_required(services, body.require_keys, actor_of(request))
        return JSONResponse(dump(body))

    @router.get("/{key_id}", response_model=ApiKeyInfo, summary="One key")
    async def get_key(key_id: str) -> Response:
        return JSONResponse(dump(await store.get(key_id)))

    @router.post("/{key_id}/revoke", response_model=ApiKeyInfo, summary="Revoke a key (its record stays)")
    async def revoke_key(key_id: str, request: Request) -> Response:
        info = await actions.revoke_key(services, key_id, actor_of(request))
        return JSONResponse(dump(info))

    @router.delete("/{key_id}", status_code=204, summary="Delete a key and its usage")
    async def delete_key(key_id: str, request: Request) -> Response:
        await actions.delete_key(services, key_id, actor_of(request))
        return Response(status_code=204)

    return router

"""``GET /api/audit``: the audit log, filtered by actor, action, subject and time, newest first, paged.

The answer is ``{entries, next}``; ``next`` is an opaque cursor, sent back as ``cursor`` for the older
page, and null on the last one. A time that does not parse, ``until`` not after ``since``, a limit
outside 1 to 500 or a cursor the log did not give out is 422 ``invalid_audit_query`` naming the field.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._composition import MasterServices
from mirbad_orchestration.stores import DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE
from mirbad_protocol.admin import AuditList

from .actions import AuditFilters, audit_page

__all__ = ["audit_router"]

_Text = str | None


def audit_router(services: MasterServices) -> APIRouter:
    """The audit route over ``services``."""
    router = APIRouter(tags=["audit"])

    @router.get(
        "/audit",
        response_model=AuditList,
        summary="The audit log, newest first: filter by actor, action, subject and time; page with next",
        responses=refusals(422),
    )
    async def audit(
        actor: Annotated[_Text, Query(description="who, exactly: `user:admin`, `key:ci`")] = None,
        action: Annotated[_Text, Query(description="what, exactly or as a dotted prefix (`model`)")] = None,
        subject: Annotated[_Text, Query(description="a model, node or key id (target or node)")] = None,
        since: Annotated[_Text, Query(description="ISO 8601, included; UTC without a zone")] = None,
        until: Annotated[_Text, Query(description="ISO 8601, excluded; UTC without a zone")] = None,
        limit: Annotated[
            _Text, Query(description=f"entries a page, 1 to {MAX_AUDIT_PAGE} ({DEFAULT_AUDIT_PAGE})")
        ] = None,
        cursor: Annotated[_Text, Query(description="the last page's `next`")] = None,
    ) -> Response:
        filters = AuditFilters(actor=actor, action=action, subject=subject, since=since, until=until)
        page = await audit_page(services, filters, limit=limit, cursor=cursor)
        return JSONResponse(page.to_wire())

    return router

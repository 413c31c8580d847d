"""The audit room: ``GET /api/audit`` and the portal's path (the room's actions) read the same pages.

The room only reads, so each scenario writes lines through the master's own audit log and reads them
back both ways on one master: the pages and the refusals of bad filters must match.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.master._rooms import api_refusal, ok, portal_refusal
from tests.master._stack import Master, running_master

from mirbad_master._api_errors import Refusal
from mirbad_master.audit import actions
from mirbad_master.audit.actions import AuditFilters
from mirbad_protocol.admin import AuditList

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def audit_master(root: Path) -> AsyncIterator[Master]:
    async with running_master(root, "local") as master:
        audit = master.services.audit
        for number in range(7):
            await audit.record("user:admin", "model.start", f"m{number}", node_id="spark")
            await audit.record("key:ci", "node.remove", f"n{number}")
        yield master


def _wire(page: AuditList) -> dict[str, Any]:
    return page.to_wire()


async def test_the_api_and_the_portal_read_the_same_pages(tmp_path: Path) -> None:
    async with audit_master(tmp_path) as master:
        first = await ok(master.admin.get("/api/audit", params={"subject": "spark", "limit": "3"}))
        second = await ok(
            master.admin.get("/api/audit", params={"subject": "spark", "limit": "3", "cursor": first["next"]})
        )
        filters = AuditFilters(subject="spark")
        by_portal = await actions.audit_page(master.services, filters, limit=3)
        everything = await ok(master.admin.get("/api/audit", params={"limit": "500"}))
        by_action = await ok(master.admin.get("/api/audit", params={"action": "node", "actor": "key:ci"}))

    assert _wire(by_portal) == first
    assert [e["target"] for e in first["entries"]] == ["m6", "m5", "m4"]
    assert [e["target"] for e in second["entries"]] == ["m3", "m2", "m1"]
    assert set(first) == {"entries", "next"}
    assert len(everything["entries"]) == 14
    assert everything["next"] is None
    assert {(e["actor"], e["action"]) for e in by_action["entries"]} == {("key:ci", "node.remove")}


async def test_times_filter_and_a_time_window_in_the_future_is_empty(tmp_path: Path) -> None:
    async with audit_master(tmp_path) as master:
        now = datetime.now(UTC)
        later = (now + timedelta(hours=1)).isoformat()
        earlier = (now - timedelta(hours=1)).isoformat()
        future = await ok(master.admin.get("/api/audit", params={"since": later}))
        window = await ok(master.admin.get("/api/audit", params={"since": earlier, "until": later}))
    assert future == {"entries": [], "next": None}
    assert len(window["entries"]) == 14


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "2025-13-01"}, "until"),
        ({"since": "2025-03-02T00:00:00Z", "until": "2025-03-01T00:00:00Z"}, "until"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "Li4vZXRjL3Bhc3N3ZDow"}, "cursor"),  # "../etc/passwd:0"
    ],
)
async def test_bad_filters_are_422_naming_the_field_both_ways(
    tmp_path: Path, params: dict[str, str], field: str
) -> None:
    async with audit_master(tmp_path) as master:
        by_api = api_refusal(await master.admin.get("/api/audit", params=params))
        limit = params.get("limit")
        filters = AuditFilters(**{k: v for k, v in params.items() if k not in ("limit", "cursor")})
        by_portal = await portal_refusal(
            lambda: actions.audit_page(master.services, filters, limit=limit, cursor=params.get("cursor"))
        )
    assert by_api == by_portal
    assert by_api.status == 422
    assert by_api.code == "invalid_audit_query"
    assert by_api.field == field
    assert isinstance(by_api, Refusal)

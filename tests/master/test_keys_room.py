"""The keys room: a change made through ``/api`` and the same change made in the portal read the same.

The portal's path is the room's actions called with the portal's actor, with the input built as the
Access page builds it (``key_request``); see ``tests.master._rooms``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import running_master

from mirbad_master._api_errors import Refusal
from mirbad_master.keys import actions
from mirbad_master.keys.page import key_request
from mirbad_master.ui._refusals import PORTAL_ACTOR

pytestmark = pytest.mark.anyio


async def test_the_same_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api") as master:
        api = master.admin
        kept = await ok(api.post("/api/keys", json={"name": "notebook"}))
        dropped = await ok(api.post("/api/keys", json={"name": "scratch"}))
        await ok(api.post(f"/api/keys/{kept['id']}/revoke"))
        await ok(api.delete(f"/api/keys/{dropped['id']}"))
        await ok(api.put("/api/keys/settings", json={"requireKeys": False}))
        through_the_api = await audit_lines(master)

    async with running_master(tmp_path / "portal") as master:
        services = master.services
        request, errors = key_request({"name": "notebook"}, datetime.now(UTC))
        assert request is not None, errors
        created = await actions.create_key(services, request, PORTAL_ACTOR)
        scratch, _ = key_request({"name": "scratch"}, datetime.now(UTC))
        assert scratch is not None
        other = await actions.create_key(services, scratch, PORTAL_ACTOR)
        await actions.revoke_key(services, created.id, PORTAL_ACTOR)
        await actions.delete_key(services, other.id, PORTAL_ACTOR)
        await actions.set_keys_required(services, False, PORTAL_ACTOR)
        required = await services.keys.keys_required()
        through_the_portal = await audit_lines(master)

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api] == [
        "key.create",
        "key.create",
        "key.revoke",
        "key.delete",
        "key.require",
    ]
    assert through_the_api[-1][:3] == ("user:admin", "key.require", "false")
    assert required is False


async def test_the_same_unknown_key_is_refused_alike(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api") as master:
        api = master.admin
        by_api = [
            api_refusal(await api.post("/api/keys/nope/revoke")),
            api_refusal(await api.delete("/api/keys/nope")),
        ]
        audit_api = await audit_lines(master)

    async with running_master(tmp_path / "portal") as master:
        services = master.services
        by_portal = [
            await portal_refusal(lambda: actions.revoke_key(services, "nope", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.delete_key(services, "nope", PORTAL_ACTOR)),
        ]
        audit_portal = await audit_lines(master)

    assert by_portal == by_api
    assert by_api[0].status == 404
    assert by_api[0].code == "key_not_found"
    assert isinstance(by_api[0], Refusal)
    assert audit_portal == audit_api == []  # a refusal leaves no audit line, whichever way it came

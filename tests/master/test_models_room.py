"""The models room: a change made through ``/api`` and the same change made in the portal read the same.

The portal's path is the room's actions called with the portal's actor, as the Models page and the
model editor call them (see ``tests.master._rooms``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import running_master

from mirbad_master._api_errors import Refusal, refusal_of
from mirbad_master.models import actions
from mirbad_master.models.actions import user_definition
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_protocol import MirbadError, ModelDefinition

pytestmark = pytest.mark.anyio

QWEN: dict[str, Any] = {"id": "qwen", "servedName": "qwen3-8b", "modelPath": "qwen", "memoryBudgetGiB": 8}
GEMMA: dict[str, Any] = {"id": "gemma", "servedName": "gemma-3", "modelPath": "gemma"}


async def test_the_same_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api") as master:
        api = master.admin
        await ok(api.post("/api/models", json=QWEN))
        await ok(api.put("/api/models/qwen", json={**QWEN, "maxNumSeqs": 8}))
        await ok(api.post("/api/models/qwen/start"))
        await ok(api.post("/api/models/qwen/restart"))
        await ok(api.post("/api/models/qwen/stop"))
        await ok(api.delete("/api/models/qwen"))
        through_the_api = await audit_lines(master)

    async with running_master(tmp_path / "portal") as master:
        services = master.services
        await actions.create_model(services, user_definition(QWEN), PORTAL_ACTOR)
        await actions.update_model(services, user_definition({**QWEN, "maxNumSeqs": 8}), PORTAL_ACTOR)
        await actions.start_model(services, "qwen", PORTAL_ACTOR)
        await actions.restart_model(services, "qwen", PORTAL_ACTOR)
        await actions.stop_model(services, "qwen", PORTAL_ACTOR)
        await actions.delete_model(services, "qwen", PORTAL_ACTOR)
        through_the_portal = await audit_lines(master)

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api][:2] == ["model.create", "model.update"]
    assert through_the_api[-1][:3] == ("user:admin", "model.delete", "qwen")


async def test_the_same_bad_input_is_refused_alike(tmp_path: Path) -> None:
    unknown_field = {**GEMMA, "maxModelLenn": 1}
    taken_name = {**GEMMA, "servedName": "qwen3-8b"}
    async with running_master(tmp_path / "api") as master:
        api = master.admin
        await ok(api.post("/api/models", json=QWEN))
        by_api = [
            api_refusal(await api.post("/api/models", json=QWEN)),
            api_refusal(await api.post("/api/models", json=taken_name)),
            api_refusal(await api.post("/api/models", json=unknown_field)),
            api_refusal(await api.put("/api/models/gemma", json=GEMMA)),
            api_refusal(await api.post("/api/models/nope/stop")),
            api_refusal(await api.post("/api/models/nope/start")),
            api_refusal(await api.post("/api/models/nope/restart")),
            api_refusal(await api.delete("/api/models/nope")),
        ]
        audit_api = await audit_lines(master)

    async with running_master(tmp_path / "portal") as master:
        services = master.services
        await actions.create_model(services, user_definition(QWEN), PORTAL_ACTOR)

        async def create(data: dict[str, Any]) -> ModelDefinition:
            return await actions.create_model(services, user_definition(data), PORTAL_ACTOR)

        by_portal = [
            await portal_refusal(lambda: create(QWEN)),
            await portal_refusal(lambda: create(taken_name)),
            await portal_refusal(lambda: create(unknown_field)),
            # An edit of a model removed meanwhile is refused, never a silent create.
            await portal_refusal(
                lambda: actions.update_model(services, user_definition(GEMMA), PORTAL_ACTOR)
            ),
            await portal_refusal(lambda: actions.stop_model(services, "nope", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.start_model(services, "nope", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.restart_model(services, "nope", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.delete_model(services, "nope", PORTAL_ACTOR)),
        ]
        audit_portal = await audit_lines(master)

    assert by_portal == by_api
    assert by_api[0] == Refusal(409, "model_exists", "a model with id 'qwen' exists", "id")
    assert audit_portal == audit_api  # a refusal leaves no audit line, whichever way it came


async def test_a_model_created_through_both_at_once_is_created_once(tmp_path: Path) -> None:
    outcomes: list[int] = []
    async with running_master(tmp_path) as master:

        async def through_the_api() -> None:
            outcomes.append((await master.admin.post("/api/models", json=QWEN)).status_code)

        async def through_the_portal() -> None:
            try:
                await actions.create_model(master.services, user_definition(QWEN), PORTAL_ACTOR)
            except MirbadError as exc:
                outcomes.append(refusal_of(exc).status)
            else:
                outcomes.append(201)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as at_once:
                for _ in range(3):
                    at_once.start_soon(through_the_portal)
                at_once.start_soon(through_the_api)
        creates = [line for line in await audit_lines(master) if line[1] == "model.create"]

    assert len(creates) == 1
    # One won; each other was told the id is taken, in the API's words.
    assert sorted(outcomes) == [201, 409, 409, 409]

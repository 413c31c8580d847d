"""One write path: a change made through ``/api`` and the same change made in the portal read the same.

Each scenario runs twice, once over HTTP against the master's app and once through the portal's action
functions, each on a master of its own; the audit lines and the refusals of the same bad input must
match (a refusal in the portal is read through the API's own error mapping).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.master._stack import Master, running_master

from mirbad_master._api_errors import Refusal, refusal_of
from mirbad_master._changes import user_definition
from mirbad_master.ui import _actions as actions
from mirbad_protocol import ApiKeyCreate, MirbadError, ModelDefinition

pytestmark = pytest.mark.anyio

QWEN: dict[str, Any] = {"id": "qwen", "servedName": "qwen3-8b", "modelPath": "qwen", "memoryBudgetGiB": 8}
GEMMA: dict[str, Any] = {"id": "gemma", "servedName": "gemma-3", "modelPath": "gemma"}
_AuditLine = tuple[str, str, str, str | None, str]


async def audit_lines(master: Master) -> list[_AuditLine]:
    """The day's audit lines, with the ids that differ from one master to the other masked."""
    entries = await master.services.audit.read(datetime.now(UTC).date())
    lines = [(e.actor, e.action, e.target, e.node_id, str(e.outcome)) for e in entries]
    # A key's id is random: only key.require names something both masters share.
    keyed = {"key.create", "key.revoke", "key.delete"}
    return [(a, action, "<key>" if action in keyed else t, n, o) for a, action, t, n, o in lines]


def api_refusal(response: httpx.Response) -> Refusal:
    assert response.status_code >= 400, response.text
    error = response.json()["error"]
    return Refusal(response.status_code, error["code"], error["message"], error.get("field"))


async def portal_refusal(change: Callable[[], Awaitable[object]]) -> Refusal:
    try:
        await change()
    except MirbadError as exc:
        return refusal_of(exc)
    raise AssertionError("the portal accepted what the API refuses")


async def ok(response: Awaitable[httpx.Response]) -> dict[str, Any]:
    answer = await response
    assert answer.status_code < 300, answer.text
    return answer.json() if answer.content else {}


async def test_the_same_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api") as master:
        api = master.admin
        await ok(api.post("/api/models", json=QWEN))
        await ok(api.put("/api/models/qwen", json={**QWEN, "maxNumSeqs": 8}))
        await ok(api.post("/api/models/qwen/start"))
        await ok(api.post("/api/models/qwen/restart"))
        await ok(api.post("/api/models/qwen/stop"))
        await ok(api.delete("/api/models/qwen"))
        key = await ok(api.post("/api/keys", json={"name": "notebook"}))
        await ok(api.post(f"/api/keys/{key['id']}/revoke"))
        await ok(api.put("/api/keys/settings", json={"requireKeys": False}))
        token = {"nodeName": "gpu-7", "address": "10.0.0.7", "ttlSeconds": 3600}
        issued = await ok(api.post("/api/nodes/enrollment-tokens", json=token))
        master.agents.down.add("gpu-2")
        node = {"id": "gpu-2", "name": "gpu-2", "agentUrl": "https://gpu-2.lan:9443"}
        await ok(api.post("/api/nodes", json=node))
        through_the_api = await audit_lines(master)
        api_command = issued["installCommand"].replace(issued["token"], "<token>")
        api_enroll_url = master.services.settings.enroll_url

    async with running_master(tmp_path / "portal") as master:
        services = master.services
        await actions.save_model(services, user_definition(QWEN), new=True)
        await actions.save_model(services, user_definition({**QWEN, "maxNumSeqs": 8}), new=False)
        await actions.start_model(services, "qwen")
        await actions.restart_model(services, "qwen")
        await actions.stop_model(services, "qwen")
        await actions.delete_model(services, "qwen")
        created = await actions.create_key(services, ApiKeyCreate(name="notebook"))
        await actions.revoke_key(services, created.id)
        await actions.set_keys_required(services, False)
        enrollment = await actions.issue_enrollment(services, "gpu-7", timedelta(hours=1), "10.0.0.7")
        master.agents.down.add("gpu-2")
        await actions.add_node(services, "gpu-2", "gpu-2", "https://gpu-2.lan:9443")
        through_the_portal = await audit_lines(master)
        portal_command = enrollment.command.replace(enrollment.token, "<token>")
        portal_enroll_url = master.services.settings.enroll_url

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api][:2] == ["model.create", "model.update"]
    assert portal_command.replace(portal_enroll_url, "<url>") == api_command.replace(api_enroll_url, "<url>")


async def test_the_same_bad_input_is_refused_alike(tmp_path: Path) -> None:
    unknown_field = {**GEMMA, "maxModelLenn": 1}
    taken_name = {**GEMMA, "servedName": "qwen3-8b"}
    bad_address = {"nodeName": "gpu-7", "address": "gpu 7; rm"}
    bad_node = {"id": "gpu-2", "name": "gpu-2", "agentUrl": "http://not-tls:9443"}
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
            api_refusal(await api.delete("/api/models/nope")),
            api_refusal(await api.post("/api/keys/nope/revoke")),
            api_refusal(await api.post("/api/nodes/enrollment-tokens", json={"nodeName": "bad name!"})),
            api_refusal(await api.post("/api/nodes", json=bad_node)),
            api_refusal(await api.post("/api/nodes/enrollment-tokens", json=bad_address)),
        ]
        audit_api = await audit_lines(master)

    async with running_master(tmp_path / "portal") as master:
        services = master.services
        await actions.save_model(services, user_definition(QWEN), new=True)

        async def save(data: dict[str, Any]) -> ModelDefinition:
            return await actions.save_model(services, user_definition(data), new=True)

        by_portal = [
            await portal_refusal(lambda: save(QWEN)),
            await portal_refusal(lambda: save(taken_name)),
            await portal_refusal(lambda: save(unknown_field)),
            # An edit of a model removed meanwhile is refused, never a silent create.
            await portal_refusal(lambda: actions.save_model(services, user_definition(GEMMA), new=False)),
            await portal_refusal(lambda: actions.stop_model(services, "nope")),
            await portal_refusal(lambda: actions.start_model(services, "nope")),
            await portal_refusal(lambda: actions.delete_model(services, "nope")),
            await portal_refusal(lambda: actions.revoke_key(services, "nope")),
            await portal_refusal(lambda: actions.issue_enrollment(services, "bad name!", timedelta(hours=1))),
            await portal_refusal(lambda: actions.add_node(services, *bad_node.values())),
            await portal_refusal(
                lambda: actions.issue_enrollment(services, "gpu-7", timedelta(hours=1), "gpu 7; rm")
            ),
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
                await actions.save_model(master.services, user_definition(QWEN), new=True)
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

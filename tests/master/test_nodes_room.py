"""The nodes room: a change made through ``/api`` and the same change made in the portal read the same.

The portal's path is the room's actions called with the portal's actor, with the bodies built as the
Nodes page builds them (``enrollment_request``, ``node_request``); see ``tests.master._rooms``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import running_master

from mirbad_master.models import actions as models
from mirbad_master.models.actions import user_definition
from mirbad_master.nodes import actions
from mirbad_master.nodes.page import enrollment_request, node_request
from mirbad_master.ui._refusals import PORTAL_ACTOR

pytestmark = pytest.mark.anyio

ON_GPU_1: dict[str, Any] = {
    "id": "qwen",
    "servedName": "qwen",
    "modelPath": "qwen",
    "placement": {"nodeId": "gpu-1"},
}
GPU_2: dict[str, str] = {"id": "gpu-2", "name": "gpu-2", "agentUrl": "https://gpu-2.lan:9443"}
HOUR = timedelta(hours=1)


async def test_the_same_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api", "local", "gpu-1") as master:
        api = master.admin
        await ok(api.post("/api/models", json=ON_GPU_1))
        token = {"nodeName": "gpu-7", "address": "10.0.0.7", "ttlSeconds": 3600}
        issued = await ok(api.post("/api/nodes/enrollment-tokens", json=token))
        master.agents.down.add("gpu-2")
        await ok(api.post("/api/nodes", json=GPU_2))
        await ok(api.delete("/api/nodes/gpu-2"))
        await ok(api.delete("/api/nodes/gpu-1", params={"unplace": "true"}))
        through_the_api = await audit_lines(master)
        api_command = issued["installCommand"].replace(issued["token"], "<token>")
        api_enroll_url = master.services.settings.enroll_url

    async with running_master(tmp_path / "portal", "local", "gpu-1") as master:
        services = master.services
        await models.create_model(services, user_definition(ON_GPU_1), PORTAL_ACTOR)
        request = enrollment_request("gpu-7", HOUR, "10.0.0.7")
        enrollment = await actions.issue_enrollment(services, request, PORTAL_ACTOR)
        master.agents.down.add("gpu-2")
        await actions.add_node(services, node_request(*GPU_2.values()), PORTAL_ACTOR)
        await actions.remove_node(services, "gpu-2", PORTAL_ACTOR)
        await actions.remove_node(services, "gpu-1", PORTAL_ACTOR, unplace=True)
        through_the_portal = await audit_lines(master)
        portal_command = enrollment.install_command.replace(enrollment.token, "<token>")
        portal_enroll_url = master.services.settings.enroll_url

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api] == [
        "model.create",
        "node.enrollment-token",
        "node.add",
        "node.remove",
        "model.unplace",
        "node.remove",
    ]
    assert through_the_api[4][2:4] == ("qwen", "gpu-1")
    assert portal_command.replace(portal_enroll_url, "<url>") == api_command.replace(api_enroll_url, "<url>")


async def test_the_same_bad_input_is_refused_alike(tmp_path: Path) -> None:
    bad_address = {"nodeName": "gpu-7", "address": "gpu 7; rm"}
    bad_node = {"id": "gpu-2", "name": "gpu-2", "agentUrl": "http://not-tls:9443"}
    async with running_master(tmp_path / "api", "local", "gpu-1") as master:
        api = master.admin
        await ok(api.post("/api/models", json=ON_GPU_1))
        by_api = [
            api_refusal(await api.post("/api/nodes/enrollment-tokens", json={"nodeName": "bad name!"})),
            api_refusal(await api.post("/api/nodes/enrollment-tokens", json=bad_address)),
            api_refusal(await api.post("/api/nodes", json=bad_node)),
            api_refusal(await api.post("/api/nodes", json={**GPU_2, "id": "gpu-1"})),
            api_refusal(await api.delete("/api/nodes/local")),
            api_refusal(await api.delete("/api/nodes/gpu-1")),
            api_refusal(await api.delete("/api/nodes/nope")),
        ]
        audit_api = await audit_lines(master)

    async with running_master(tmp_path / "portal", "local", "gpu-1") as master:
        services = master.services
        await models.create_model(services, user_definition(ON_GPU_1), PORTAL_ACTOR)

        async def issue(name: str, address: str | None = None) -> object:
            return await actions.issue_enrollment(
                services, enrollment_request(name, HOUR, address), PORTAL_ACTOR
            )

        async def add(node: dict[str, str]) -> object:
            return await actions.add_node(services, node_request(*node.values()), PORTAL_ACTOR)

        by_portal = [
            await portal_refusal(lambda: issue("bad name!")),
            await portal_refusal(lambda: issue("gpu-7", "gpu 7; rm")),
            await portal_refusal(lambda: add(bad_node)),
            await portal_refusal(lambda: add({**GPU_2, "id": "gpu-1"})),
            await portal_refusal(lambda: actions.remove_node(services, "local", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.remove_node(services, "gpu-1", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.remove_node(services, "nope", PORTAL_ACTOR)),
        ]
        audit_portal = await audit_lines(master)

    assert by_portal == by_api
    assert [refusal.code for refusal in by_api[3:]] == [
        "node_exists",
        "local_node",
        "node_has_models",
        "node_not_found",
    ]
    assert by_api[0].field == "nodeName"
    assert audit_portal == audit_api  # a refusal leaves no audit line, whichever way it came

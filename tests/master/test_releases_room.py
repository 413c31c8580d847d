"""The releases room: an image pull's start and cancel through ``/api`` and through the portal read the same.

Each scenario runs twice over tests/master/test_api_releases.py's fake agents (``local`` pulls,
``gpu-1`` has no Docker), each on a master of its own: once over HTTP, once through the room's actions
as the Releases page calls them; the audit lines and the refusals must match.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from tests._support.polling import eventually
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_releases import IMAGE, agent
from tests.orchestration._fake_agent import Refusal

from mirbad_master.releases import actions
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_protocol.agent import AgentErrorCode

pytestmark = pytest.mark.anyio

PULLS = "/api/nodes/local/image-pulls"


@asynccontextmanager
async def releases_master(root: Path) -> AsyncIterator[Master]:
    async with running_master(root, "local", "gpu-1", agent=agent) as master:
        await eventually(lambda: all(s.info is not None for s in master.services.cache.nodes()), timeout_s=10)
        yield master


async def test_a_pull_started_and_cancelled_leaves_the_same_audit_lines(tmp_path: Path) -> None:
    async with releases_master(tmp_path / "api") as master:
        pull = await ok(master.admin.post(PULLS, json={"image": IMAGE}))
        await ok(master.admin.delete(f"{PULLS}/{pull['id']}"))
        through_the_api = await audit_lines(master)

    async with releases_master(tmp_path / "portal") as master:
        started = await actions.start_image_pull(master.services, "local", IMAGE, PORTAL_ACTOR)
        await actions.cancel_image_pull(master.services, "local", started.id, PORTAL_ACTOR)
        through_the_portal = await audit_lines(master)

    assert through_the_portal == through_the_api
    assert [(line[1], line[2], line[3]) for line in through_the_api] == [
        ("image.pull", "pull-0", "local"),
        ("image.pull.cancel", "pull-0", "local"),
    ]


async def test_the_same_refusals_come_back_and_leave_no_audit_line(tmp_path: Path) -> None:
    conflict = Refusal(409, AgentErrorCode.PULL_CONFLICT, "a pull of x is running already")
    gone = Refusal(404, AgentErrorCode.PULL_NOT_FOUND, "no image pull 'pull-9'")
    async with releases_master(tmp_path / "api") as master:
        api = master.admin
        by_api = [
            api_refusal(await api.post(PULLS, json={"image": "vllm/Upper:case"})),
            api_refusal(await api.post("/api/nodes/gpu-1/image-pulls", json={"image": IMAGE})),
            api_refusal(await api.post("/api/nodes/nowhere/image-pulls", json={"image": IMAGE})),
        ]
        master.agents.agents["local"].refusals["pull_start"] = conflict
        by_api.append(api_refusal(await api.post(PULLS, json={"image": IMAGE})))
        master.agents.agents["local"].refusals["pull_cancel"] = gone
        by_api.append(api_refusal(await api.delete(f"{PULLS}/pull-9")))
        audit_api = await audit_lines(master)

    async with releases_master(tmp_path / "portal") as master:
        services = master.services
        by_portal = [
            await portal_refusal(
                lambda: actions.start_image_pull(services, "local", "vllm/Upper:case", PORTAL_ACTOR)
            ),
            await portal_refusal(lambda: actions.start_image_pull(services, "gpu-1", IMAGE, PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.start_image_pull(services, "nowhere", IMAGE, PORTAL_ACTOR)),
        ]
        master.agents.agents["local"].refusals["pull_start"] = conflict
        by_portal.append(
            await portal_refusal(lambda: actions.start_image_pull(services, "local", IMAGE, PORTAL_ACTOR))
        )
        master.agents.agents["local"].refusals["pull_cancel"] = gone
        by_portal.append(
            await portal_refusal(lambda: actions.cancel_image_pull(services, "local", "pull-9", PORTAL_ACTOR))
        )
        audit_portal = await audit_lines(master)

    assert by_portal == by_api
    assert [(r.status, r.code, r.field) for r in by_api] == [
        (422, "invalid_image_reference", "image"),
        (409, "feature_missing", "image"),
        (404, "node_not_found", None),
        (409, "pull_conflict", None),
        (404, "pull_not_found", None),
    ]
    assert audit_api == audit_portal == []

"""The downloads room: a download change through ``/api`` and through the portal reads the same.

Each scenario runs twice over fake agents (``local`` offers both download kinds, ``gpu-1`` none), each
on a master of its own: once over HTTP, once through the room's actions as the portal's panels call
them; the audit lines (refused starts included) and the refusals must match.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_downloads import HF, OLLAMA, agent
from tests.orchestration._fake_agent import Refusal

from mirbad_master.downloads import actions
from mirbad_master.downloads.panels import parse_download
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_protocol.agent import AgentErrorCode
from mirbad_protocol.downloads import HuggingFaceDownload

pytestmark = pytest.mark.anyio

DOWNLOADS = "/api/nodes/local/downloads"


async def masked_lines(master: Master) -> list[tuple[str, str, str, str | None, str]]:
    """The audit lines, a download's id (the agent's, random) masked."""
    return [
        (actor, action, "<id>" if target.startswith("dl-") else target, node, outcome)
        for actor, action, target, node, outcome in await audit_lines(master)
    ]


async def test_the_same_download_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api", "local", "gpu-1", agent=agent) as master:
        api = master.admin
        job = await ok(api.post(DOWNLOADS, json=HF))
        await ok(api.delete(f"{DOWNLOADS}/{job['id']}"))
        await ok(api.post(f"{DOWNLOADS}/{job['id']}/retry"))
        await ok(api.delete(f"{DOWNLOADS}/{job['id']}", params={"remove": "true"}))
        await ok(api.post(DOWNLOADS, json=OLLAMA))
        through_the_api = await masked_lines(master)

    async with running_master(tmp_path / "portal", "local", "gpu-1", agent=agent) as master:
        services = master.services
        # The search box's own parse of what a person types, then the room's action.
        request = HuggingFaceDownload.from_user_input(HF)
        started = await actions.start_download(services, "local", request, PORTAL_ACTOR)
        await actions.cancel_download(services, "local", started.id, PORTAL_ACTOR)
        await actions.retry_download(services, "local", started.id, PORTAL_ACTOR)
        await actions.cancel_download(services, "local", started.id, PORTAL_ACTOR, remove=True)
        typed = parse_download("ollama:qwen3:0.6b", "qwen3-ollama")
        await actions.start_download(services, "local", typed, PORTAL_ACTOR)
        through_the_portal = await masked_lines(master)

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api] == [
        "download.start",
        "download.cancel",
        "download.retry",
        "download.cancel",  # the retried job runs again: a removal stops it first
        "download.remove",
        "download.start",
    ]


async def test_the_same_refusals_come_back_and_refused_starts_are_audited_alike(tmp_path: Path) -> None:
    said_no = Refusal(409, AgentErrorCode.DOWNLOAD_CONFLICT, "the node says no", field="folder")
    async with running_master(tmp_path / "api", "local", "gpu-1", agent=agent) as master:
        api = master.admin
        by_api = [
            api_refusal(await api.post("/api/nodes/gpu-1/downloads", json=OLLAMA)),
            api_refusal(await api.post("/api/nodes/nowhere/downloads", json=OLLAMA)),
            api_refusal(await api.delete(f"{DOWNLOADS}/not-an-id")),
            api_refusal(await api.post(f"{DOWNLOADS}/dl-000000000000/retry")),
        ]
        master.local.refusals["download_start"] = said_no
        by_api.append(api_refusal(await api.post(DOWNLOADS, json=HF)))
        audit_api = await masked_lines(master)

    async with running_master(tmp_path / "portal", "local", "gpu-1", agent=agent) as master:
        services = master.services
        ollama = parse_download("ollama:qwen3:0.6b", "qwen3-ollama")
        by_portal = [
            await portal_refusal(lambda: actions.start_download(services, "gpu-1", ollama, PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.start_download(services, "nowhere", ollama, PORTAL_ACTOR)),
            await portal_refusal(
                lambda: actions.cancel_download(services, "local", "not-an-id", PORTAL_ACTOR)
            ),
            await portal_refusal(
                lambda: actions.retry_download(services, "local", "dl-000000000000", PORTAL_ACTOR)
            ),
        ]
        master.local.refusals["download_start"] = said_no
        request = HuggingFaceDownload.from_user_input(HF)
        by_portal.append(
            await portal_refusal(lambda: actions.start_download(services, "local", request, PORTAL_ACTOR))
        )
        audit_portal = await masked_lines(master)

    assert by_portal == by_api
    assert [(r.status, r.code, r.field) for r in by_api] == [
        (409, "feature_missing", "kind"),
        (404, "node_not_found", None),
        (400, "invalid_request", "downloadId"),
        (404, "download_not_found", None),
        (409, "download_conflict", "folder"),
    ]
    assert audit_portal == audit_api
    # A refused start is audited (who tried to put what where); other refusals write nothing.
    assert [(line[1], line[4]) for line in audit_api] == [("download.start", "refused")] * 3

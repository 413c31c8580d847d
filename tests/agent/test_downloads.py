"""The download routes in-process (httpx's ASGI transport) against the loopback hub and registry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests._support.model_hub import (
    PARAMS,
    PRIVATE_REPO,
    REPO,
    TEMPLATE,
    Hold,
    Lies,
    Sources,
    loopback_sources,
    refused_endpoint,
    silent_endpoint,
)
from tests._support.polling import eventually
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

from mirbad_agent import AgentServices, ComposedDriver, NodeRuntimes, create_app
from mirbad_protocol import ExecutableRef, ProcessLaunch
from mirbad_protocol.agent import FeatureFlag, ProcessRuntimeInfo, StartRequest
from mirbad_protocol.downloads import DownloadJob, DownloadList, DownloadSize
from mirbad_runtime import MemoryProbe
from mirbad_runtime.downloads import TEMP_PREFIX, DownloadManager, NetworkLimits
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

BASE = "http://agent/agent/v1"
WAIT_S = 30.0


@dataclass
class Node:
    client: httpx.AsyncClient
    sources: Sources
    root: Path


def _services(root: Path, downloads: DownloadManager | None) -> AgentServices:
    return AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="node-1",
        model_roots=[root],
        version="0.0.test",
        downloads=downloads,
    )


@pytest.fixture
async def node(tmp_path: Path, gguf_bytes: bytes) -> AsyncIterator[Node]:
    root = tmp_path / "models"
    root.mkdir()
    free = {"bytes": 1 << 40}
    async with loopback_sources(gguf_bytes) as sources, anyio.create_task_group() as group:
        manager = DownloadManager(
            [root],
            tmp_path / "state",
            hf_endpoint=sources.hub_url,
            ollama_registry=sources.registry_url,
            free_space=lambda _root: free["bytes"],
        )
        await group.start(manager.run)
        services = _services(root, manager)
        transport = httpx.ASGITransport(app=create_app(services, background=False))
        async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            client.free = free  # type: ignore[attr-defined]  # lets a test shrink the disk
            yield Node(client, sources, root)
        group.cancel_scope.cancel()


def _error(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error.get("field")


async def _finished(client: httpx.AsyncClient, job_id: str) -> DownloadJob:
    async def read() -> DownloadJob:
        return DownloadJob.from_wire((await client.get(f"/downloads/{job_id}")).json())

    with anyio.fail_after(WAIT_S):
        # Polled by design: a client of the agent has only GET to follow a job.
        while (job := await read()).state in ("queued", "running", "verifying"):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return job


async def test_an_agent_with_downloads_reports_both_feature_flags(node: Node) -> None:
    features = (await node.client.get("/runtimes")).json()["features"]
    assert FeatureFlag.DOWNLOADS_HF_NATIVE.value in features
    assert FeatureFlag.DOWNLOADS_OLLAMA.value in features


async def test_an_agent_without_downloads_reports_no_flag_and_refuses_the_routes(tmp_path: Path) -> None:
    services = _services(tmp_path, None)
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        features = (await client.get("/runtimes")).json()["features"]
        assert not [flag for flag in features if flag.startswith("downloads.")]
        assert _error(await client.get("/downloads"))[:2] == (404, "route_not_found")


async def test_start_follow_and_list_a_hugging_face_download(node: Node) -> None:
    body = {"kind": "huggingface", "repoId": REPO, "folder": "tiny", "allowPatterns": ["*.gguf"]}
    started = await node.client.post("/downloads", json=body)
    assert started.status_code == 202, started.text
    job = await _finished(node.client, started.json()["id"])
    assert (job.state, job.revision, job.source) == ("completed", node.sources.commit, f"{REPO}@main")
    assert (node.root / "tiny" / "weights" / "tiny.gguf").read_bytes() == node.sources.gguf
    listed = DownloadList.from_wire((await node.client.get("/downloads")).json())
    assert [item.id for item in listed.downloads] == [job.id]


async def _held_gguf_download(node: Node) -> tuple[str, Hold]:
    """Start the GGUF's download through the route and wait until the hub holds it 32 KiB in."""
    node.sources.hub.hold = hold = Hold("weights/tiny.gguf", after_bytes=32 * 1024)
    body = {"kind": "huggingface", "repoId": REPO, "folder": "tiny", "allowPatterns": ["*.gguf"]}
    job_id = (await node.client.post("/downloads", json=body)).json()["id"]
    with anyio.fail_after(WAIT_S):
        await hold.reached.wait()
    return job_id, hold


async def test_start_an_ollama_download(node: Node) -> None:
    started = await node.client.post("/downloads", json={"kind": "ollama", "model": "tiny", "folder": "olla"})
    assert started.status_code == 202, started.text
    job = await _finished(node.client, started.json()["id"])
    assert job.state == "completed"
    assert sorted(p.name for p in (node.root / "olla").iterdir()) == ["model.gguf", "params", "template"]


async def test_cancel_then_remove_through_the_routes(node: Node) -> None:
    job_id, _held = await _held_gguf_download(node)
    cancelled = await node.client.post(f"/downloads/{job_id}/cancel")
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    assert _error(await node.client.post(f"/downloads/{job_id}/cancel"))[:2] == (409, "download_conflict")
    assert not (node.root / "tiny").exists()
    assert (await node.client.delete(f"/downloads/{job_id}")).status_code == 204
    assert list(node.root.iterdir()) == []
    assert _error(await node.client.get(f"/downloads/{job_id}"))[:2] == (404, "download_not_found")


async def test_a_token_is_used_but_never_returned(node: Node) -> None:
    token = node.sources.hub.token
    body = {"kind": "huggingface", "repoId": PRIVATE_REPO, "folder": "private", "token": token}
    started = await node.client.post("/downloads", json=body)
    assert started.status_code == 202, started.text
    job = await _finished(node.client, started.json()["id"])
    assert job.state == "completed", job.error
    for answer in (
        started,
        await node.client.get("/downloads"),
        await node.client.get(f"/downloads/{job.id}"),
    ):
        assert token not in answer.text
        assert "token" not in answer.json()


_HF = {"kind": "huggingface", "repoId": REPO, "folder": "tiny"}


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({**_HF, "repoId": "no-owner"}, 400, "invalid_request", "repoId"),
        ({**_HF, "folder": "a/b"}, 400, "invalid_request", "folder"),
        ({**_HF, "folder": ".."}, 400, "invalid_request", "folder"),
        ({**_HF, "folder": "..\\x"}, 400, "invalid_request", "folder"),
        ({**_HF, "revision": "v404"}, 404, "source_not_found", "revision"),
        ({**_HF, "repoId": "mirbad/missing"}, 404, "source_not_found", "repoId"),
        ({**_HF, "repoId": PRIVATE_REPO}, 403, "source_needs_token", "token"),
        ({**_HF, "root": 7}, 400, "invalid_request", "root"),
        ({**_HF, "revison": "main"}, 400, "invalid_request", "revison"),
        ({**_HF, "kind": "torrent"}, 400, "invalid_request", "kind"),
        ({"kind": "ollama", "model": "tiny:nope", "folder": "x"}, 404, "source_not_found", "model"),
        ({"kind": "ollama", "model": "Bad Name", "folder": "x"}, 400, "invalid_request", "model"),
        # issue 31 item 12: a trailing newline went through "$" (the Ollama one as a traceback and 502)
        ({**_HF, "repoId": f"{REPO}\n"}, 400, "invalid_request", "repoId"),
        ({**_HF, "revision": "main\n"}, 400, "invalid_request", "revision"),
        ({"kind": "ollama", "model": "tiny\n", "folder": "x"}, 400, "invalid_request", "model"),
    ],
)
async def test_bad_input_is_a_4xx_naming_the_field(
    node: Node, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    assert _error(await node.client.post("/downloads", json=body)) == (status, code, field)
    assert list(node.root.iterdir()) == []


async def test_a_private_repository_without_a_token_says_so(node: Node) -> None:
    answer = await node.client.post("/downloads", json={**_HF, "repoId": PRIVATE_REPO})
    assert "this repository needs a token" in answer.json()["error"]["message"]


async def test_a_full_disk_is_refused_with_the_shortfall(node: Node) -> None:
    node.client.free["bytes"] = 10  # type: ignore[attr-defined]
    answer = await node.client.post("/downloads", json=_HF)
    assert _error(answer) == (409, "insufficient_space", "root")
    assert "bytes short" in answer.json()["error"]["message"]
    assert not [p for p in node.root.iterdir() if p.name.startswith(TEMP_PREFIX)]


async def test_not_json_is_refused(node: Node) -> None:
    answer = await node.client.post("/downloads", content=b"{", headers={"content-type": "application/json"})
    assert _error(answer)[:2] == (400, "invalid_request")
    assert json.loads(answer.text)["error"]["field"] == "(document)"


async def test_retry_resumes_a_cancelled_job_through_the_route(node: Node) -> None:
    job_id, hold = await _held_gguf_download(node)
    with anyio.fail_after(WAIT_S):
        # Polled by design: the agent's GET is how a client sees bytes reach the disk.
        while not DownloadJob.from_wire((await node.client.get(f"/downloads/{job_id}")).json()).done_bytes:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    await node.client.post(f"/downloads/{job_id}/cancel")
    hold.release()
    retried = await node.client.post(f"/downloads/{job_id}/retry")
    assert retried.status_code == 200
    assert (DownloadJob.from_wire(retried.json()).id, DownloadJob.from_wire(retried.json()).state) == (
        job_id,
        "queued",
    )
    assert (await _finished(node.client, job_id)).state == "completed"
    assert [offset for _, offset in node.sources.hub.requests][-1] not in (None, "bytes=0-")
    assert _error(await node.client.post(f"/downloads/{job_id}/retry")) == (409, "download_conflict", "state")


async def test_a_folder_conflict_names_the_field_and_no_path_of_the_node(node: Node) -> None:
    (node.root / "tiny").mkdir()
    answer = await node.client.post("/downloads", json=_HF)
    assert _error(answer) == (409, "download_conflict", "folder")
    assert str(node.root) not in answer.text


async def test_each_file_of_a_job_names_the_digest_it_is_checked_against(node: Node) -> None:
    answer = await node.client.post("/downloads", json={**_HF, "allowPatterns": ["config.json", "*.gguf"]})
    files = {item["path"]: item for item in answer.json()["files"]}
    assert set(files["config.json"]) >= {"gitSha1"}
    assert "gitSha1" not in files["weights/tiny.gguf"]
    assert "sha256" in files["weights/tiny.gguf"]
    assert (await _finished(node.client, answer.json()["id"])).state == "completed"


@pytest.mark.parametrize("download_id", ["%2e%2e", "dl-x", "dl-0123456789AB"])
async def test_a_hostile_download_id_is_refused_naming_the_field(node: Node, download_id: str) -> None:
    for answer in (
        await node.client.get(f"/downloads/{download_id}"),
        await node.client.post(f"/downloads/{download_id}/retry"),
        await node.client.delete(f"/downloads/{download_id}"),
    ):
        assert _error(answer) == (400, "invalid_request", "downloadId")


async def test_an_unreachable_hub_is_a_clear_refusal_not_an_internal_error(tmp_path: Path) -> None:
    # Issue 31 item 7: huggingface_hub 2.x raises httpx2's errors, which once escaped as a 500.
    manager = DownloadManager([tmp_path], tmp_path / "state", hf_endpoint=refused_endpoint())
    services = _services(tmp_path, manager)
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with anyio.create_task_group() as group:
        await group.start(manager.run)
        async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            refused = await client.post(
                "/downloads", json={"kind": "huggingface", "repoId": REPO, "folder": "x"}
            )
        group.cancel_scope.cancel()
    assert _error(refused)[:2] == (502, "upstream_unreachable")
    assert "cannot reach the hub" in refused.json()["error"]["message"]


def _tiny_start() -> dict[str, Any]:
    spec = ProcessLaunch(
        model_id="tiny",
        served_name="tiny-served",
        runtime="llamacpp",
        argv=["--model", TINY_MODEL_PATH],
        model_path=TINY_MODEL_PATH,
        budget_gib=1.0,
        config_hash="0123456789abcdef",
        executable=ExecutableRef(name="llama-server", version="test"),
    )
    return StartRequest(spec=spec).to_wire()


STARTS = 50


async def test_fifty_starts_against_a_silent_hub_leave_the_agent_working(tmp_path: Path) -> None:
    # Issue 31 item 6: planning against a hub that never answers once took every worker thread, so
    # model starts, stops and the health poll froze with it.
    root = tmp_path / "models"
    write_tiny_gguf(root / TINY_MODEL_PATH)
    processes = FakeDriver(port_range_start=8500)
    executables = [ExecutableRef(name="llama-server", version="test")]
    runtimes = NodeRuntimes(
        [ComposedDriver(processes, (ProcessRuntimeInfo(runtime="llamacpp", executables=executables),))]
    )
    answers: list[httpx.Response] = []
    async with silent_endpoint() as silent, anyio.create_task_group() as group:
        manager = DownloadManager(
            [root], tmp_path / "state", hf_endpoint=silent.url, limits=NetworkLimits(plan_timeout_s=10.0)
        )
        await group.start(manager.run)
        services = AgentServices(
            runtimes=runtimes,
            memory=MemoryProbe(linux=False, fake_total_gib=16.0),
            node_name="node-1",
            model_roots=[root],
            version="0.0.test",
            downloads=manager,
        )
        transport = httpx.ASGITransport(app=create_app(services, background=False))
        async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:

            async def start(index: int) -> None:
                body = {"kind": "huggingface", "repoId": REPO, "folder": f"m{index}"}
                answers.append(await client.post("/downloads", json=body))

            async with anyio.create_task_group() as starts:
                for index in range(STARTS):
                    starts.start_soon(start, index)
                await eventually(lambda: silent.connections >= 1, timeout_s=WAIT_S)
                with anyio.fail_after(WAIT_S):
                    # Worker threads are still there for the rest of the agent (Docker, files, probes).
                    assert await anyio.to_thread.run_sync(lambda: "free") == "free"
                    started = await client.post("/models/tiny/start", json=_tiny_start())
                    health = [(await client.get(path)).status_code for path in ("/runtimes", "/telemetry")]
                    stopped = await client.post("/models/tiny/stop")
        group.cancel_scope.cancel()
    assert (started.status_code, stopped.status_code, health) == (200, 200, [200, 200])
    assert [_error(answer)[:2] for answer in answers] == [(502, "upstream_unreachable")] * STARTS


# The size route (issue 25 item 4): what a start would fetch, read from the hub, nothing started.


async def test_the_size_of_a_download_is_the_hubs_files(node: Node) -> None:
    hub = node.sources.hub.repos[REPO]
    whole = await node.client.post("/downloads/size", json=_HF)
    ggufs = await node.client.post("/downloads/size", json={**_HF, "allowPatterns": ["*.gguf"]})
    ollama_body = {"kind": "ollama", "model": "tiny", "folder": "o"}
    ollama = await node.client.post("/downloads/size", json=ollama_body)
    assert whole.status_code == ggufs.status_code == ollama.status_code == 200, (whole.text, ollama.text)
    assert DownloadSize.from_wire(whole.json()) == DownloadSize(
        revision=node.sources.commit,
        total_bytes=sum(len(data) for data in hub.files.values()),
        file_count=len(hub.files),
    )
    assert (ggufs.json()["totalBytes"], ggufs.json()["fileCount"]) == (len(node.sources.gguf), 1)
    # The GGUF layer, the template and the parameters, as a start would fetch them.
    layers = len(node.sources.gguf) + len(TEMPLATE) + len(PARAMS)
    assert (ollama.json()["totalBytes"], ollama.json()["fileCount"]) == (layers, 3)
    assert FeatureFlag.DOWNLOADS_SIZE.value in (await node.client.get("/runtimes")).json()["features"]
    assert DownloadList.from_wire((await node.client.get("/downloads")).json()).downloads == []
    assert list(node.root.iterdir()) == []


async def test_a_size_uses_the_token_and_never_returns_it(node: Node) -> None:
    token = node.sources.hub.token
    private = {**_HF, "repoId": PRIVATE_REPO}
    refused = await node.client.post("/downloads/size", json=private)
    sized = await node.client.post("/downloads/size", json={**private, "token": token})
    assert _error(refused) == (403, "source_needs_token", "token")
    assert sized.status_code == 200, sized.text
    assert sized.json()["fileCount"] == 1
    assert token not in sized.text
    assert node.sources.hub.authorizations[-1] == f"Bearer {token}"


@pytest.mark.parametrize(
    ("lie", "reason"),
    [(Lies(status=503), "answered 503"), (Lies(endless=True), "the source is not trusted")],
)
async def test_a_lying_hub_gives_no_size_but_a_reason(node: Node, lie: Lies, reason: str) -> None:
    node.sources.hub.lies = lie
    answer = await node.client.post("/downloads/size", json=_HF)
    assert _error(answer)[:2] == (502, "upstream_unreachable")
    assert reason in answer.json()["error"]["message"]


async def test_a_silent_hub_gives_no_size_within_the_planning_deadline(tmp_path: Path) -> None:
    async with silent_endpoint() as silent, anyio.create_task_group() as group:
        limits = NetworkLimits(plan_timeout_s=1.0)
        manager = DownloadManager([tmp_path], tmp_path / "state", hf_endpoint=silent.url, limits=limits)
        await group.start(manager.run)
        services = _services(tmp_path, manager)
        transport = httpx.ASGITransport(app=create_app(services, background=False))
        async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            answer = await client.post("/downloads/size", json=_HF)
        group.cancel_scope.cancel()
    assert _error(answer)[:2] == (502, "upstream_unreachable")
    assert "did not answer" in answer.json()["error"]["message"]


async def test_a_size_on_a_node_without_downloads_is_not_found(tmp_path: Path) -> None:
    services = _services(tmp_path, None)
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        assert _error(await client.post("/downloads/size", json=_HF))[:2] == (404, "route_not_found")

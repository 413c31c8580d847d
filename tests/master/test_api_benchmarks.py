"""The benchmark API over a real master composition: jobs, maintenance on /v1, results and refusals.

The node is a fake agent whose model proxy leads to a stand-in chat server (``_fake_chat``); sizes are
tiny (N = 1 and 2, one run, 4 tokens), named here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.orchestration._fake_agent import FakeAgent, Refusal
from tests.orchestration._fake_chat import FakeChatServer

from mirbad_orchestration.jobs import MAINTENANCE_FILE_NAME
from mirbad_protocol import GpuMemory, ModelMetrics
from mirbad_protocol.agent import AGENT_API_PREFIX, AgentErrorCode
from mirbad_protocol.benchmarks import BenchmarkSizes

pytestmark = pytest.mark.anyio

TINY = BenchmarkSizes(levels=[1, 2], runs=1, max_tokens=4, prefill_tokens=80, question_tokens=4)
WAIT_S = 10.0
QWEN: dict[str, Any] = {"id": "qwen", "servedName": "Qwen3-8B", "modelPath": "qwen", "memoryBudgetGiB": 16}
GEMMA: dict[str, Any] = {"id": "gemma", "servedName": "gemma-3", "modelPath": "gemma", "memoryBudgetGiB": 8}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@dataclass
class ChattyAgent(FakeAgent):
    """A fake agent whose model proxy answers with the stand-in chat server."""

    chat: FakeChatServer = field(default_factory=FakeChatServer)

    @property
    def app(self) -> Starlette:
        app = super().app
        app.router.routes.append(
            Route(AGENT_API_PREFIX + "/proxy/{model_id}/{path:path}", self._proxy, methods=["POST"])
        )
        return app

    async def _proxy(self, request: Request) -> Response:
        transport = httpx.ASGITransport(app=self.chat.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
            answer = await client.post(f"/{request.path_params['path']}", content=await request.body())
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))


def chatty(node_id: str) -> FakeAgent:
    return ChattyAgent(node_name=node_id)


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    options = {"benchmark_sizes": TINY, "drain_timeout_s": 2.0, "gpu_sample_s": 0.1}
    async with running_master(tmp_path, "local", "gpu-1", agent=chatty, services_options=options) as master:
        yield master


def chat_of(master: Master, node_id: str = "local") -> FakeChatServer:
    agent = master.agents.agents[node_id]
    assert isinstance(agent, ChattyAgent)
    return agent.chat


async def ready(master: Master, body: dict[str, Any], node_id: str = "local") -> None:
    placed = body | {"placement": {"nodeId": node_id}} if node_id != "local" else body
    assert (await master.admin.post("/api/models", json=placed)).status_code == 201
    assert (await master.admin.post(f"/api/models/{body['id']}/start")).status_code == 200
    # Idle telemetry from the future: newer than any job's start, so the drain passes at once.
    later = datetime.now(UTC) + timedelta(hours=1)
    master.agents.agents[node_id].telemetry[body["id"]] = [ModelMetrics(model_id=body["id"], at=later)]
    await eventually(lambda: master.services.telemetry.latest(body["id"]) is not None, timeout_s=WAIT_S)


async def v1_chat(master: Master, served_name: str) -> httpx.Response:
    return await master.anonymous.post("/v1/chat/completions", json=CHAT | {"model": served_name})


async def test_a_benchmark_holds_its_node_in_maintenance_and_stores_a_result(master: Master) -> None:
    await ready(master, QWEN)
    await ready(master, GEMMA, "gpu-1")
    chat_of(master).hold = anyio.Event()

    started = await master.admin.post("/api/models/qwen/benchmark")
    job = started.json()
    await eventually(lambda: chat_of(master).holding > 0, timeout_s=WAIT_S)
    progress = (await master.admin.get("/api/benchmark")).json()["jobs"]
    held = await v1_chat(master, "Qwen3-8B")
    other_node = await v1_chat(master, "gemma-3")
    second = await master.admin.post("/api/models/qwen/benchmark")
    status = await master.admin.get("/api/status")
    health = await master.anonymous.get("/healthz")
    hold = chat_of(master).hold
    assert hold is not None
    hold.set()
    ended = await master.services.jobs.wait(job["id"], timeout_s=WAIT_S)
    after = await v1_chat(master, "Qwen3-8B")
    listed = (await master.admin.get("/api/models/qwen/benchmarks")).json()
    audit = (master.services.settings.data_dir / "audit").glob("*")

    assert started.status_code == 202
    assert (job["modelId"], job["nodeId"], job["state"]) == ("qwen", "local", "running")
    assert [(j["id"], j["state"]) for j in progress] == [(job["id"], "running")]
    assert progress[0]["phase"] in ("warm-up", "concurrency")
    assert held.status_code == 503
    assert held.json()["error"]["code"] == "maintenance"
    assert int(held.headers["retry-after"]) >= 1
    assert other_node.status_code == 200
    assert second.status_code == 409
    assert second.json()["error"] | {"message": ""} == {
        "code": "job_conflict", "message": "", "jobId": job["id"], "modelId": "qwen", "nodeId": "local",
    }  # fmt: skip
    assert status.status_code == 200
    assert health.status_code == 200
    assert ended.state == "succeeded"
    assert after.status_code == 200
    [result] = listed["results"]
    assert [level["concurrency"] for level in result["levels"]] == [1, 2]
    assert result["settings"]
    assert result["gpu"] == "skipped: the node has no GPU"
    assert "model.benchmark" in "".join(path.read_text() for path in audit)


async def benchmark_result(master: Master, model_id: str) -> dict[str, Any]:
    job = (await master.admin.post(f"/api/models/{model_id}/benchmark")).json()
    assert (await master.services.jobs.wait(job["id"], timeout_s=WAIT_S)).state == "succeeded"
    [result] = (await master.admin.get(f"/api/models/{model_id}/benchmarks")).json()["results"]
    return dict(result)


async def test_a_gpu_busy_outside_mirbad_makes_the_result_noisy(master: Master) -> None:
    await ready(master, QWEN)
    gpus = [GpuMemory(index=0, uuid="GPU-0", name="H200", total_mib=143771, utilization_percent=71)]
    master.local.gpus = gpus

    result = await benchmark_result(master, "qwen")
    reads = [path for method, path in master.local.requests if path.endswith("/node/gpus")]

    assert result["gpu"] == "busy"
    assert result["noisy"] == ["GPU busy with work outside Mirbad (GPU 0: 71 % mean, 71 % max)"]
    # Asked of the agent for each reading (a 0.1 s window at most 1 s apart: two), not from telemetry.
    assert len(reads) == 2


async def test_a_node_whose_gpus_cannot_be_read_says_why(master: Master) -> None:
    await ready(master, QWEN)
    failed = "GPU probe failed: nvidia-smi exited with 9: NVIDIA-SMI has failed"
    master.local.refusals["gpus"] = Refusal(503, AgentErrorCode.PROBE_FAILED, failed)

    result = await benchmark_result(master, "qwen")

    assert result["gpu"].startswith("skipped: the node's GPUs could not be read (")
    assert failed in result["gpu"]
    assert result["noisy"] == []


async def test_refusals_of_the_benchmark_api(master: Master) -> None:
    assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201

    stopped = await master.admin.post("/api/models/qwen/benchmark")
    preset = await master.admin.post("/api/models/qwen/benchmark", params={"preset": "fastest"})
    unknown = await master.admin.post("/api/models/nope/benchmark")
    unknown_list = await master.admin.get("/api/models/nope/benchmarks")
    nothing = await master.admin.delete("/api/benchmark")

    assert stopped.status_code == 409
    assert stopped.json()["error"]["code"] == "model_not_ready"
    assert "Stopped" in stopped.json()["error"]["message"]
    assert preset.status_code == 422
    assert preset.json()["error"]["code"] == "unknown_preset"
    assert preset.json()["error"]["field"] == "preset"
    assert "classic" in preset.json()["error"]["message"]
    assert unknown.status_code == 404
    assert unknown_list.status_code == 404
    assert nothing.status_code == 404
    assert nothing.json()["error"]["code"] == "job_not_found"


async def test_cancel_leaves_maintenance_off(master: Master) -> None:
    await ready(master, QWEN)
    chat_of(master).hold = anyio.Event()
    await master.admin.post("/api/models/qwen/benchmark")
    await eventually(lambda: chat_of(master).holding > 0, timeout_s=WAIT_S)
    flag = master.services.settings.data_dir / MAINTENANCE_FILE_NAME
    held = flag.exists()

    cancelled = await master.admin.delete("/api/benchmark", params={"node": "local"})
    chat_of(master).hold = None
    after = await v1_chat(master, "Qwen3-8B")

    assert held
    assert cancelled.status_code == 200
    assert [job["state"] for job in cancelled.json()["jobs"]] == ["cancelled"]
    assert not flag.exists()
    assert after.status_code == 200
    assert (await master.admin.get("/api/models/qwen/benchmarks")).json()["results"] == []


async def test_a_corrupt_result_file_is_skipped_in_the_list(master: Master) -> None:
    assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201
    folder = master.services.settings.data_dir / "benchmarks" / "qwen"
    folder.mkdir(parents=True)
    (folder / "20260101T000000Z.json").write_text("{broken")

    listed = await master.admin.get("/api/models/qwen/benchmarks")

    assert listed.status_code == 200
    assert listed.json() == {"results": [], "skipped": ["20260101T000000Z.json"]}


async def test_a_node_held_by_a_crashed_master_serves_again_after_a_restart(tmp_path: Path) -> None:
    flag = tmp_path / "data" / MAINTENANCE_FILE_NAME
    flag.parent.mkdir(parents=True)
    held = {"jobId": "j1", "message": "benchmark", "retryAfterS": 60, "servedNames": ["Qwen3-8B"]}
    flag.write_text(json.dumps({"nodes": {"local": held}}))

    async with running_master(tmp_path, agent=chatty) as master:
        await ready(master, QWEN)
        answer = await v1_chat(master, "Qwen3-8B")

    assert answer.status_code == 200
    assert not flag.exists()


async def test_the_benchmark_routes_are_in_the_openapi_document(master: Master) -> None:
    paths = (await master.admin.get("/openapi.json")).json()["paths"]

    assert set(paths["/api/models/{model_id}/benchmark"]) == {"post"}
    assert set(paths["/api/models/{model_id}/benchmarks"]) == {"get"}
    assert set(paths["/api/benchmark"]) == {"get", "delete"}

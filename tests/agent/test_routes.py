"""Every route of the agent app in-process (httpx's ASGI transport) over fake drivers and probes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from syrupy.assertion import SnapshotAssertion
from tests._support.hostd import FAKE_NVIDIA_SMI
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

from mirbad_agent import AgentServices, ComposedDriver, NodeRuntimes, create_app
from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    GpuMemory,
    GpuSelection,
    MemorySnapshot,
    ModelState,
    ModelStatus,
    ProcessLaunch,
)
from mirbad_protocol.agent import (
    MAX_REQUEST_BODY_BYTES,
    AgentInfo,
    ContainerRuntimeInfo,
    FolderListing,
    LogTail,
    ModelFile,
    ModelFileList,
    ProcessRuntimeInfo,
    StartRequest,
    StatusList,
    TelemetrySnapshot,
)
from mirbad_runtime import LaunchRejectedError, MemoryProbe, NvidiaSmiProbe, RuntimeUnavailableError
from mirbad_runtime.exceptions import GpuProbeError, StateWriteError
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

BASE = "http://agent/agent/v1"
HASH = "0123456789abcdef"


def container_spec(model_id: str = "big", budget_gib: float = 4.0, **changes: Any) -> ContainerLaunch:
    fields: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "runtime": "vllm",
        "argv": ["--model", f"/models/{model_id}"],
        "model_path": model_id,
        "budget_gib": budget_gib,
        "config_hash": HASH,
        "image": "vllm/vllm-openai:test",
        **changes,
    }
    return ContainerLaunch(**fields)


def process_spec(model_id: str = "tiny", budget_gib: float = 1.0) -> ProcessLaunch:
    return ProcessLaunch(
        model_id=model_id,
        served_name=f"{model_id}-served",
        runtime="llamacpp",
        argv=["--model", TINY_MODEL_PATH],
        model_path=TINY_MODEL_PATH,
        budget_gib=budget_gib,
        config_hash=HASH,
        executable=ExecutableRef(name="llama-server", version="test"),
    )


def body(spec: ContainerLaunch | ProcessLaunch, *, force: bool = False) -> dict[str, Any]:
    return StartRequest(spec=spec, force=force).to_wire()


@dataclass
class Node:
    """One agent app over fakes, with the parts a test steers."""

    containers: FakeDriver
    processes: FakeDriver
    services: AgentServices
    client: httpx.AsyncClient
    root: Path


def _composed(containers: FakeDriver | None, processes: FakeDriver | None) -> list[ComposedDriver]:
    drivers: list[ComposedDriver] = []
    if containers is not None:
        drivers.append(ComposedDriver(containers, (ContainerRuntimeInfo(runtime="vllm", network="mirbad"),)))
    if processes is not None:
        executables = [ExecutableRef(name="llama-server", version="test")]
        drivers.append(
            ComposedDriver(processes, (ProcessRuntimeInfo(runtime="llamacpp", executables=executables),))
        )
    return drivers


def _fake_metrics() -> Callable[[httpx.Request], httpx.Response]:
    scrapes = {"count": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        scrapes["count"] += 1
        tokens = 100 * scrapes["count"]
        text = (
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
            f"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total {tokens}\n"
        )
        return (
            httpx.Response(200, text=text) if request.url.path.endswith("/metrics") else httpx.Response(404)
        )

    return handler


def _echo_model() -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        payload = await request.body()
        return JSONResponse({"path": request.url.path, "query": request.url.query, "bytes": len(payload)})

    return Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST"])])


@pytest.fixture
def model_root(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    write_tiny_gguf(root / TINY_MODEL_PATH)
    (root / "notes.txt").write_text("not a model")
    return root


def make_node(
    root: Path,
    *,
    containers: FakeDriver | None = None,
    processes: FakeDriver | None = None,
    total_gib: float = 16.0,
    reserve_gib: float = 2.0,
    gpu_probe: Callable[[], Awaitable[Sequence[GpuMemory]]] | None = None,
    raise_app_exceptions: bool = True,
) -> Node:
    containers = containers if containers is not None else FakeDriver()
    processes = processes if processes is not None else FakeDriver(port_range_start=8500)
    memory = MemoryProbe(linux=False, fake_total_gib=total_gib, reserve_gib=reserve_gib, gpu_probe=gpu_probe)
    services = AgentServices(
        runtimes=NodeRuntimes(_composed(containers, processes)),
        memory=memory,
        node_name="node-1",
        gpu_probe=gpu_probe,
        model_roots=[root],
        version="0.0.test",
        http=httpx.AsyncClient(transport=httpx.MockTransport(_fake_metrics())),
        proxy_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=_echo_model())),
    )
    app = create_app(services, background=False)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
    return Node(containers, processes, services, httpx.AsyncClient(transport=transport, base_url=BASE), root)


@pytest.fixture
async def node(model_root: Path) -> AsyncIterator[Node]:
    built = make_node(model_root)
    async with built.client, built.services:
        yield built


def error_of(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    assert set(error) <= {"code", "message", "field"}
    return response.status_code, error["code"], error.get("field")


# ---------------------------------------------------------------- runtimes


HAS_BOOT_ID = Path("/proc/sys/kernel/random/boot_id").exists()


async def test_runtimes_report_the_composed_drivers_and_features(
    node: Node, snapshot_json: SnapshotAssertion
) -> None:
    response = await node.client.get("/runtimes")
    info = AgentInfo.from_wire(response.json())
    assert response.status_code == 200
    assert info.model_roots == [str(node.root)]
    # The host's boot id differs on every machine; on Linux it is always there.
    assert info.boot_id or not HAS_BOOT_ID
    assert info.cpu_count is not None
    assert info.cpu_count >= 1  # the machine's own: left out of the snapshot like the boot id
    body = {key: value for key, value in response.json().items() if key not in ("bootId", "cpuCount")}
    assert {**body, "modelRoots": ["<tmp>"]} == snapshot_json


async def test_a_node_without_runtimes_refuses_every_launch(model_root: Path) -> None:
    services = AgentServices(
        runtimes=NodeRuntimes([]), memory=MemoryProbe(linux=False), node_name="bare", version="0.0.test"
    )
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        info = (await client.get("/runtimes")).json()
        container = await client.post("/models/big/start", json=body(container_spec()))
        process = await client.post("/models/tiny/start", json=body(process_spec()))
        listed = (await client.get("/models")).json()
    assert AgentInfo.from_wire(info).runtimes == []
    assert "runtime.vllm.container" not in info["features"]
    assert error_of(container)[:2] == (422, "spec_rejected")
    assert error_of(process)[:2] == (422, "spec_rejected")
    assert listed == {}


# ---------------------------------------------------------------- start, status, stop, restart


async def test_start_runs_the_spec_on_its_driver_and_reports_it(node: Node) -> None:
    started = await node.client.post("/models/big/start", json=body(container_spec()))
    again = await node.client.post("/models/big/start", json=body(container_spec()))
    tiny = await node.client.post("/models/tiny/start", json=body(process_spec()))
    listed = StatusList.from_wire((await node.client.get("/models")).json())
    one = ModelStatus.from_wire((await node.client.get("/models/big")).json())
    unknown = ModelStatus.from_wire((await node.client.get("/models/nobody")).json())

    assert started.status_code == 200, started.text
    assert ModelStatus.from_wire(started.json()).state is ModelState.READY
    assert again.json() == started.json()
    assert tiny.status_code == 200
    assert [spec.model_id for spec in node.containers.starts] == ["big"]  # the second start launched nothing
    assert [spec.model_id for spec in node.processes.starts] == ["tiny"]
    assert [(status.id, status.state, status.port) for status in listed.models] == [
        ("big", ModelState.READY, 8100),
        ("tiny", ModelState.READY, 8500),
    ]
    assert (one.id, one.served_name, one.config_hash) == ("big", "big-served", HASH)
    assert (unknown.id, unknown.state) == ("nobody", ModelState.STOPPED)


async def test_start_refuses_malformed_requests(node: Node) -> None:
    other_id = await node.client.post("/models/other/start", json=body(container_spec()))
    bad_field = body(container_spec())
    bad_field["spec"]["budgetGiB"] = -1
    negative = await node.client.post("/models/big/start", json=bad_field)
    not_json = await node.client.post("/models/big/start", content=b"{not json")
    empty = await node.client.post("/models/big/start")
    bad_force = await node.client.post("/models/big/start?force=maybe", json=body(container_spec()))

    assert error_of(other_id) == (400, "invalid_request", "spec.modelId")
    status, code, field = error_of(negative)
    assert (status, code) == (400, "invalid_request")
    assert field == "spec.container.budgetGiB"
    assert error_of(not_json)[:3] == (400, "invalid_request", "(document)")
    assert error_of(empty)[:2] == (400, "invalid_request")
    assert error_of(bad_force) == (400, "invalid_request", "force")
    assert node.containers.starts == []


async def test_admission_refuses_a_budget_over_the_free_memory_unless_forced(node: Node) -> None:
    # 16 GiB available, 2 GiB reserve: 15 GiB does not fit.
    refused = await node.client.post("/models/big/start", json=body(container_spec(budget_gib=15)))
    by_query = await node.client.post(
        "/models/big/start?force=true", json=body(container_spec(budget_gib=15))
    )
    await node.client.post("/models/big/stop")
    by_body = await node.client.post(
        "/models/big/start", json=body(container_spec(budget_gib=15), force=True)
    )

    status, code, _ = error_of(refused)
    assert (status, code) == (409, "admission_refused")
    assert "15.0 GiB" in refused.json()["error"]["message"]
    assert by_query.status_code == 200
    assert by_body.status_code == 200
    assert len(node.containers.starts) == 2  # the refused start never reached the driver


async def test_per_gpu_budgets_on_discrete_gpus(model_root: Path) -> None:
    async def one_gpu() -> list[GpuMemory]:
        return [GpuMemory(index=0, uuid="GPU-0", name="H200", total_mib=16 * 1024)]

    built = make_node(model_root, gpu_probe=one_gpu, total_gib=512)
    async with built.client, built.services:
        first = await built.client.post("/models/a/start", json=body(container_spec("a", budget_gib=8)))
        second = await built.client.post("/models/b/start", json=body(container_spec("b", budget_gib=8)))
        elsewhere = await built.client.post(
            "/models/c/start",
            json=body(container_spec("c", budget_gib=1, gpus=GpuSelection(mode="uuids", uuids=["GPU-9"]))),
        )
    assert first.status_code == 200
    assert error_of(second)[:2] == (409, "admission_refused")
    assert "GPU-0" in second.json()["error"]["message"]
    assert error_of(elsewhere)[:2] == (422, "spec_rejected")


async def test_an_adopted_model_is_charged_to_the_gpus_it_was_given(model_root: Path) -> None:
    async def two_gpus() -> list[GpuMemory]:
        return [GpuMemory(index=i, uuid=f"GPU-{i}", name="H200", total_mib=16 * 1024) for i in (0, 1)]

    on_gpu0 = GpuSelection(mode="uuids", uuids=["GPU-0"])
    on_gpu1 = GpuSelection(mode="uuids", uuids=["GPU-1"])
    containers = FakeDriver()  # what runs outlives the agent: the second agent adopts model a from it
    before = make_node(model_root, containers=containers, gpu_probe=two_gpus, total_gib=512)
    async with before.client, before.services:
        first = await before.client.post(
            "/models/a/start", json=body(container_spec("a", budget_gib=8, gpus=on_gpu0))
        )
    after = make_node(model_root, containers=containers, gpu_probe=two_gpus, total_gib=512)
    async with after.client, after.services:
        beside = await after.client.post(
            "/models/b/start", json=body(container_spec("b", budget_gib=8, gpus=on_gpu1))
        )
        over = await after.client.post(
            "/models/c/start", json=body(container_spec("c", budget_gib=8, gpus=on_gpu0))
        )
        listed = await after.client.get("/models")
    assert first.status_code == 200
    assert beside.status_code == 200, beside.text
    assert error_of(over)[:2] == (409, "admission_refused")
    assert "GPU-0" in over.json()["error"]["message"]
    adopted = next(status for status in StatusList.from_wire(listed.json()).models if status.id == "a")
    assert adopted.gpus == on_gpu0


async def test_one_start_at_a_time_on_unified_memory(model_root: Path) -> None:
    built = make_node(model_root, containers=FakeDriver(start_state=ModelState.STARTING))
    async with built.client, built.services:
        first = await built.client.post("/models/a/start", json=body(container_spec("a", budget_gib=1)))
        conflict = await built.client.post("/models/b/start", json=body(container_spec("b", budget_gib=1)))
        await built.client.get("/models/b")  # reading another model's status keeps the slot of a
        still = await built.client.post("/models/b/start", json=body(container_spec("b", budget_gib=1)))
        built.containers.set_state("a", ModelState.READY)
        await built.client.get("/models")  # a status read frees the slot of a model past Starting
        second = await built.client.post("/models/b/start", json=body(container_spec("b", budget_gib=1)))
    assert ModelStatus.from_wire(first.json()).state is ModelState.STARTING
    assert error_of(conflict)[:2] == (409, "start_conflict")
    assert error_of(still)[:2] == (409, "start_conflict")
    assert "model a " in conflict.json()["error"]["message"]
    assert second.status_code == 200


async def test_driver_refusals_map_to_contract_codes(node: Node) -> None:
    node.containers.fail_next_start(LaunchRejectedError("no free host port in 8100-8499"))
    rejected = await node.client.post("/models/big/start", json=body(container_spec()))
    node.containers.fail_next_start(RuntimeUnavailableError("Docker did not answer within 30 s"))
    unavailable = await node.client.post("/models/big/start", json=body(container_spec()))
    after = await node.client.post("/models/other/start", json=body(container_spec("other")))

    assert error_of(rejected)[:2] == (422, "spec_rejected")
    assert rejected.json()["error"]["message"] == "no free host port in 8100-8499"
    assert error_of(unavailable)[:2] == (503, "runtime_unavailable")
    assert after.status_code == 200  # a failed launch gave its start slot back


async def test_a_model_running_under_another_runtime_is_a_conflict(node: Node) -> None:
    await node.client.post("/models/tiny/start", json=body(process_spec()))
    clash = await node.client.post("/models/tiny/start", json=body(container_spec("tiny")))
    assert error_of(clash)[:2] == (409, "start_conflict")


async def test_stop_removes_the_instance_and_is_idempotent(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    stopped = await node.client.post("/models/big/stop")
    again = await node.client.post("/models/big/stop")
    listed = await node.client.get("/models")
    assert ModelStatus.from_wire(stopped.json()).state is ModelState.STOPPED
    assert ModelStatus.from_wire(again.json()).state is ModelState.STOPPED
    assert node.containers.stops == ["big"]
    assert listed.json() == {}


class FullDisk(FakeDriver):
    """A driver that stops the model, then cannot write its record: the disk is full."""

    async def stop(self, model_id: str) -> None:
        await super().stop(model_id)
        records = Path("/state/processes.json")
        raise StateWriteError(records, f"cannot write {records}: No space left on device", disk_full=True)


async def test_a_stop_with_the_disk_full_is_507_saying_the_model_was_stopped(model_root: Path) -> None:
    # Issue 31 item 18: it was a 500 internal error (the master's 502) and the model read Failed.
    built = make_node(model_root, processes=FullDisk(port_range_start=8500), total_gib=4.0, reserve_gib=0.0)
    async with built.client, built.services:
        await built.client.post("/models/tiny/start", json=body(process_spec(budget_gib=3.0)))
        stopped = await built.client.post("/models/tiny/stop")
        status = await built.client.get("/models/tiny")
        again = await built.client.post("/models/tiny/start", json=body(process_spec(budget_gib=3.0)))

    assert error_of(stopped)[:2] == (507, "insufficient_storage")
    assert "'tiny' was stopped" in stopped.json()["error"]["message"]
    assert "processes.json" in stopped.json()["error"]["message"]
    assert ModelStatus.from_wire(status.json()).state is ModelState.STOPPED
    assert again.status_code == 200, again.text  # nothing of it holds the node


async def test_restart_counts_the_running_budget_as_free(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec(budget_gib=10)))
    bigger = container_spec(budget_gib=20, argv=["--model", "/models/big", "--max-num-seqs", "8"])
    # As a new model it would not fit (16 - 2 < 20); replacing a 10 GiB instance it does (16 + 10 - 2).
    refused = await node.client.post("/models/other/start", json=body(container_spec("other", budget_gib=20)))
    restarted = await node.client.post("/models/big/restart", json=body(bigger))
    mismatched = await node.client.post("/models/nope/restart", json=body(bigger))

    assert error_of(refused)[:2] == (409, "admission_refused")
    assert restarted.status_code == 200, restarted.text
    assert node.containers.stops == ["big"]
    assert node.containers.starts[-1].argv[-1] == "8"
    assert ModelStatus.from_wire(restarted.json()).budget_gib == 20
    assert error_of(mismatched)[:3] == (400, "invalid_request", "spec.modelId")


# ---------------------------------------------------------------- logs


async def test_log_tail(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    node.containers.add_log("big", "one", "two", "three")
    tail = LogTail.from_wire((await node.client.get("/models/big/logs?tail=2")).json())
    unknown = await node.client.get("/models/nobody/logs")
    bad_tail = await node.client.get("/models/big/logs?tail=-1")
    assert tail == LogTail(model_id="big", lines=["two", "three"])
    assert error_of(unknown)[:2] == (404, "model_not_found")
    assert error_of(bad_tail) == (400, "invalid_request", "tail")


async def test_followed_logs_stream_events_until_the_model_ends(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    node.containers.add_log("big", "loading", "ready")
    node.containers.set_state("big", ModelState.FAILED, error="exit 1")  # a follow ends with the model
    async with node.client.stream("GET", "/models/big/logs?follow=true&tail=2") as response:
        events = [json.loads(line) async for line in response.aiter_lines() if line]
    assert response.headers["content-type"] == "application/x-ndjson"
    assert events == [
        {"kind": "line", "line": "loading"},
        {"kind": "line", "line": "ready"},
        {"kind": "end"},
    ]


# ---------------------------------------------------------------- node


async def test_memory_and_gpus(model_root: Path) -> None:
    async def gpus() -> list[GpuMemory]:
        return [GpuMemory(index=0, uuid="GPU-0", name="H200", total_mib=143771, used_mib=100)]

    built = make_node(model_root, gpu_probe=gpus)
    async with built.client, built.services:
        memory = MemorySnapshot.from_wire((await built.client.get("/node/memory")).json())
        listed = (await built.client.get("/node/gpus")).json()
    assert (memory.total_gib, memory.reserve_gib, memory.unified) == (16.0, 2.0, False)
    assert listed == {
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "H200", "totalMiB": 143771.0, "usedMiB": 100.0}]
    }


async def test_gpus_carry_utilization_read_by_the_stand_in_nvidia_smi(
    model_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "gpu.json"
    gpu = {"index": 0, "uuid": "GPU-0", "name": "H200", "total": 143771, "used": 100, "utilization": 63}
    state.write_text(json.dumps({"gpus": [gpu]}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))

    built = make_node(model_root, gpu_probe=NvidiaSmiProbe(FAKE_NVIDIA_SMI).query)
    async with built.client, built.services:
        listed = (await built.client.get("/node/gpus")).json()
        memory = MemorySnapshot.from_wire((await built.client.get("/node/memory")).json())
    assert listed["gpus"][0]["utilizationPercent"] == 63.0
    assert [g.utilization_percent for g in memory.gpus] == [63.0]


async def test_a_failing_gpu_probe_is_probe_failed(model_root: Path) -> None:
    async def wedged() -> list[GpuMemory]:
        raise GpuProbeError("nvidia-smi did not answer within 10 s")

    built = make_node(model_root, gpu_probe=wedged)
    async with built.client, built.services:
        memory = await built.client.get("/node/memory")
        gpus = await built.client.get("/node/gpus")
        start = await built.client.post("/models/big/start", json=body(container_spec()))
    assert error_of(memory)[:2] == (503, "probe_failed")
    assert error_of(gpus)[:2] == (503, "probe_failed")
    assert error_of(start)[:2] == (503, "probe_failed")  # admission does not guess without GPUs


async def test_telemetry_ring_keeps_samples_with_rates(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    await node.client.post("/models/tiny/start", json=body(process_spec()))
    node.processes.set_state("tiny", ModelState.STARTING)  # only Ready models are scraped
    await node.services.telemetry.scrape_once()
    await node.services.telemetry.scrape_once()

    snapshot = TelemetrySnapshot.from_wire((await node.client.get("/telemetry")).json())
    latest = TelemetrySnapshot.from_wire((await node.client.get("/telemetry?model=big&limit=1")).json())
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    none = TelemetrySnapshot.from_wire((await node.client.get("/telemetry", params={"since": future})).json())
    bad_since = await node.client.get("/telemetry?since=yesterday")
    bad_limit = await node.client.get("/telemetry?limit=100000")

    [big] = snapshot.models
    assert big.model_id == "big"
    assert [sample.generation_tokens_total for sample in big.samples] == [100, 200]
    assert big.samples[0].generation_tokens_per_second is None
    assert big.samples[1].generation_tokens_per_second is not None
    assert big.samples[1].requests_running == 2
    assert snapshot.interval_s == 5
    assert [len(model.samples) for model in latest.models] == [1]
    assert none.models == []
    assert error_of(bad_since) == (400, "invalid_request", "since")
    assert error_of(bad_limit) == (400, "invalid_request", "limit")


async def test_stopping_a_model_drops_its_telemetry(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    await node.services.telemetry.scrape_once()
    await node.client.post("/models/big/stop")
    assert TelemetrySnapshot.from_wire((await node.client.get("/telemetry")).json()).models == []


async def test_gguf_inspection(node: Node) -> None:
    info = await node.client.post("/gguf/inspect", json={"path": TINY_MODEL_PATH})
    missing = await node.client.post("/gguf/inspect", json={"path": "tiny/missing.gguf"})
    escaping = await node.client.post("/gguf/inspect", json={"path": "../etc/passwd"})
    absolute = await node.client.post("/gguf/inspect", json={"path": "/etc/passwd"})
    not_gguf = await node.client.post("/gguf/inspect", json={"path": "notes.txt"})
    no_path = await node.client.post("/gguf/inspect", json={})

    assert info.status_code == 200, info.text
    assert (info.json()["architecture"], info.json()["blockCount"]) == ("llama", 2)
    assert error_of(missing)[:2] == (404, "path_not_found")
    assert error_of(escaping)[:2] == (403, "path_refused")
    assert error_of(absolute)[:2] == (403, "path_refused")
    assert error_of(not_gguf)[:2] == (422, "gguf_unreadable")
    assert error_of(no_path) == (400, "invalid_request", "path")


async def test_folders(node: Node) -> None:
    root = FolderListing.from_wire((await node.client.get("/folders")).json())
    tiny = FolderListing.from_wire((await node.client.get("/folders", params={"path": "tiny"})).json())
    no_root = await node.client.get("/folders?root=3")
    escaping = await node.client.get("/folders", params={"path": "tiny/../.."})
    assert [(entry.name, entry.kind) for entry in root.entries] == [
        ("notes.txt", "file"),
        ("tiny", "directory"),
    ]
    assert [entry.name for entry in tiny.entries] == ["tiny-llama.gguf"]
    assert error_of(no_root) == (400, "invalid_request", "root")
    assert error_of(escaping)[:2] == (403, "path_refused")


async def test_model_files_say_which_paths_are_under_the_roots(node: Node) -> None:
    answer = await node.client.post("/model-files", json={"paths": [TINY_MODEL_PATH, "tiny", "gone", "../x"]})
    not_a_list = await node.client.post("/model-files", json={"paths": "tiny"})

    assert answer.status_code == 200
    assert ModelFileList.from_wire(answer.json()).files == [
        ModelFile(path=TINY_MODEL_PATH, present=True),
        ModelFile(path="tiny", present=True),
        ModelFile(path="gone"),
        ModelFile(path="../x"),
    ]
    assert error_of(not_a_list) == (400, "invalid_request", "paths")


# ---------------------------------------------------------------- limits and plumbing


async def test_bodies_over_the_limit_are_413(node: Node) -> None:
    declared = await node.client.post(
        "/models/big/start",
        content=b"x" * (MAX_REQUEST_BODY_BYTES + 1),
        headers={"content-type": "application/json"},
    )

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_REQUEST_BODY_BYTES // (1 << 20) + 1):
            yield b" " * (1 << 20)

    chunked = await node.client.post("/models/big/start", content=chunks())
    assert error_of(declared)[:2] == (413, "request_too_large")
    assert error_of(chunked)[:2] == (413, "request_too_large")
    assert node.containers.starts == []


async def test_unknown_routes_and_methods(node: Node) -> None:
    missing = await node.client.get("/no/such/route")
    outside = await node.client.get("http://agent/elsewhere")
    wrong = await node.client.delete("/models")
    assert error_of(missing)[:2] == (404, "route_not_found")
    assert error_of(outside)[:2] == (404, "route_not_found")
    assert error_of(wrong)[:2] == (405, "method_not_allowed")


class BrokenDriver(FakeDriver):
    async def list_statuses(self) -> list[ModelStatus]:
        raise RuntimeError("a bug with a secret path /etc/shadow")


async def test_an_unexpected_error_is_a_generic_500(model_root: Path) -> None:
    built = make_node(model_root, containers=BrokenDriver(), raise_app_exceptions=False)
    async with built.client, built.services:
        response = await built.client.get("/models")
    assert error_of(response)[:2] == (500, "internal_error")
    assert "secret" not in response.text


class UnavailableDriver(FakeDriver):
    """A driver whose runtime does not answer, as a container driver's does when dockerd is down."""

    async def list_statuses(self) -> list[ModelStatus]:
        raise RuntimeUnavailableError(f"driver on port {self.port_range_start} did not answer")


async def test_docker_failing_during_a_listing_is_503_runtime_unavailable(model_root: Path) -> None:
    built = make_node(model_root, containers=UnavailableDriver(), raise_app_exceptions=False)
    async with built.client, built.services:
        await built.client.post("/models/tiny/start", json=body(process_spec()))
        response = await built.client.get("/models")
    # A partial list (the process model alone) would read as the container models having stopped.
    assert error_of(response)[:2] == (503, "runtime_unavailable")
    assert response.json()["error"]["message"] == "driver on port 8100 did not answer"


async def test_every_driver_failing_during_a_listing_is_one_503(model_root: Path) -> None:
    containers, processes = UnavailableDriver(), UnavailableDriver(port_range_start=8500)
    built = make_node(model_root, containers=containers, processes=processes, raise_app_exceptions=False)
    async with built.client, built.services:
        response = await built.client.get("/models")
    assert error_of(response)[:2] == (503, "runtime_unavailable")
    assert response.json()["error"]["message"] in {
        "driver on port 8100 did not answer",
        "driver on port 8500 did not answer",
    }


async def test_the_proxy_forwards_to_the_model_and_refuses_unknown_models(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    node.containers.set_upstream("big", "http://model/base/")
    forwarded = await node.client.post("/proxy/big/v1/chat/completions?x=1", json={"model": "big-served"})
    unknown = await node.client.post("/proxy/nobody/v1/chat/completions", json={})
    assert forwarded.status_code == 200, forwarded.text
    assert forwarded.json()["path"] == "/base/v1/chat/completions"
    assert forwarded.json()["query"] == "x=1"
    assert error_of(unknown)[:2] == (404, "model_not_found")


async def test_telemetry_carries_the_measured_memory_where_the_runtime_has_it(node: Node) -> None:
    await node.client.post("/models/big/start", json=body(container_spec()))
    await node.client.post("/models/tiny/start", json=body(process_spec()))
    node.containers.set_memory("big", 312 * 1024**2)
    await node.services.telemetry.scrape_once()

    models = TelemetrySnapshot.from_wire((await node.client.get("/telemetry")).json()).models
    raw = (await node.client.get("/telemetry?model=big")).json()

    assert {model.model_id: model.samples[-1].memory_bytes for model in models} == {
        "big": 312 * 1024**2,
        "tiny": None,
    }
    assert raw["models"][0]["samples"][0]["memoryBytes"] == 312 * 1024**2

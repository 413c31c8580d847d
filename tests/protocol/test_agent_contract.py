"""The master-agent contract on the wire: one golden file per envelope, codes, flags and paths."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    GpuMemory,
    GpuSelection,
    InvalidFieldError,
    ModelMetrics,
    ModelState,
    ModelStatus,
    ProcessLaunch,
    WireModel,
)
from mirbad_protocol.agent import (
    AGENT_API_PREFIX,
    DEFAULT_AGENT_PORT,
    GPU_MEMORY_FROM_BUDGET,
    MAX_PROXY_BODY_BYTES,
    ROUTE_MODEL_FILES,
    ROUTE_MODEL_LOGS,
    ROUTE_MODEL_START,
    ROUTE_RUNTIMES,
    AgentErrorBody,
    AgentErrorCode,
    AgentInfo,
    ContainerRuntimeInfo,
    FeatureFlag,
    FolderEntry,
    FolderListing,
    GgufInspectRequest,
    GpuList,
    HostGpuSample,
    LogEnd,
    LogLine,
    LogTail,
    ModelFile,
    ModelFileList,
    ModelFilesRequest,
    ModelTelemetry,
    ProcessRuntimeInfo,
    RestartRequest,
    ServiceGpuMemory,
    StartRequest,
    StatusList,
    TelemetrySnapshot,
    agent_error_body,
    agent_path,
    proxy_path,
)

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LATER = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)

CONTAINER = ContainerLaunch(
    model_id="qwen3-8b",
    served_name="qwen3-8b",
    runtime="vllm",
    argv=["--model", "/models/qwen3-8b", "--served-model-name", "qwen3-8b"],
    model_path="qwen3-8b",
    budget_gib=24.0,
    gpus=GpuSelection(mode="uuids", uuids=["GPU-1"]),
    config_hash="0123456789abcdef",
    image="vllm/vllm-openai:v0.11.0",
)
PROCESS = ProcessLaunch(
    model_id="tiny",
    served_name="tiny-chat",
    runtime="llamacpp",
    argv=["--model", "tiny/tiny.gguf", "--ctx-size", "256"],
    model_path="tiny/tiny.gguf",
    budget_gib=0.5,
    config_hash="fedcba9876543210",
    executable=ExecutableRef(name="llama-server", version="b6000"),
)


def _round_trip(model: WireModel) -> None:
    assert type(model).from_wire(model.to_wire()) == model


def test_agent_info(snapshot_json: SnapshotAssertion) -> None:
    info = AgentInfo(
        node_name="spark-1",
        version="0.1.0",
        runtimes=[
            ContainerRuntimeInfo(runtime="vllm", network="mirbad"),
            ProcessRuntimeInfo(
                runtime="llamacpp", executables=[ExecutableRef(name="llama-server", version="b6000")]
            ),
        ],
        features=[
            FeatureFlag.RUNTIME_VLLM_CONTAINER,
            FeatureFlag.RUNTIME_LLAMACPP_PROCESS,
            FeatureFlag.GGUF_INSPECT,
        ],
        model_roots=["/srv/models"],
    )
    assert info.to_wire() == snapshot_json
    _round_trip(info)


def test_a_node_without_runtimes_reports_an_empty_list() -> None:
    info = AgentInfo(node_name="mac", version="0.1.0")
    assert info.to_wire() == {"nodeName": "mac", "version": "0.1.0"}
    assert AgentInfo.from_wire(info.to_wire()).runtimes == []


def test_unknown_feature_flags_and_fields_of_a_newer_agent_still_read() -> None:
    info = AgentInfo.from_wire(
        {"nodeName": "n", "version": "9", "features": ["teleport.v2"], "shinyNewField": {"a": 1}}
    )
    assert info.features == ["teleport.v2"]


def test_start_and_restart_requests_keep_the_spec_kind(snapshot_json: SnapshotAssertion) -> None:
    start = StartRequest(spec=CONTAINER, force=True)
    restart = RestartRequest(spec=PROCESS)
    assert {"start": start.to_wire(), "restart": restart.to_wire()} == snapshot_json
    assert start.to_wire()["spec"]["kind"] == "container"
    assert restart.to_wire()["spec"]["kind"] == "process"
    _round_trip(start)
    _round_trip(restart)


def test_a_start_request_without_a_spec_kind_names_the_field() -> None:
    body = StartRequest(spec=PROCESS).to_wire()
    del body["spec"]["kind"]
    with pytest.raises(InvalidFieldError) as caught:
        StartRequest.from_wire(body)
    assert caught.value.field == "spec"


def test_status_list_and_log_tail(snapshot_json: SnapshotAssertion) -> None:
    statuses = StatusList(
        models=[
            ModelStatus(id="a", served_name="a", state=ModelState.READY, runtime="llamacpp", port=8500),
            ModelStatus(id="b", served_name="b", state=ModelState.FAILED, error="exit 1\nboom", port=8100),
        ]
    )
    tail = LogTail(model_id="b", lines=["loading", "boom"])
    assert {"statuses": statuses.to_wire(), "tail": tail.to_wire()} == snapshot_json
    _round_trip(statuses)
    _round_trip(tail)


def test_log_events(snapshot_json: SnapshotAssertion) -> None:
    events = [LogLine(line="INFO started"), LogEnd(), LogEnd(reason="error", message="Docker went away")]
    assert [event.to_wire() for event in events] == snapshot_json
    for event in events:
        _round_trip(event)


def test_gpu_list_and_telemetry(snapshot_json: SnapshotAssertion) -> None:
    gpus = GpuList(gpus=[GpuMemory(index=0, uuid="GPU-1", name="H200", total_mib=143771, used_mib=512)])
    telemetry = TelemetrySnapshot(
        taken_at=LATER,
        interval_s=5,
        models=[
            ModelTelemetry(
                model_id="a",
                samples=[
                    ModelMetrics(model_id="a", at=AT, generation_tokens_total=100),
                    ModelMetrics(
                        model_id="a",
                        at=LATER,
                        requests_running=1,
                        generation_tokens_total=150,
                        generation_tokens_per_second=10,
                    ),
                ],
            )
        ],
    )
    assert {"gpus": gpus.to_wire(), "telemetry": telemetry.to_wire()} == snapshot_json
    _round_trip(gpus)
    _round_trip(telemetry)


def test_folders_and_gguf_request(snapshot_json: SnapshotAssertion) -> None:
    listing = FolderListing(
        root=0,
        path="org/model",
        entries=[
            FolderEntry(name="config.json", kind="file", size_bytes=712),
            FolderEntry(name="shards", kind="directory"),
        ],
        truncated=True,
    )
    request = GgufInspectRequest(path="org/model/model-Q4_K_M.gguf")
    assert {"listing": listing.to_wire(), "gguf": request.to_wire()} == snapshot_json
    _round_trip(listing)
    _round_trip(request)


def test_model_files_request_and_answer(snapshot_json: SnapshotAssertion) -> None:
    request = ModelFilesRequest(paths=["qwen3-8b", "tiny/model.gguf"])
    answer = ModelFileList(
        files=[ModelFile(path="qwen3-8b", present=True), ModelFile(path="tiny/model.gguf")]
    )
    assert {"request": request.to_wire(), "answer": answer.to_wire()} == snapshot_json
    assert agent_path(ROUTE_MODEL_FILES) == "/agent/v1/model-files"
    assert FeatureFlag.MODEL_FILES.value == "model-files.check"
    _round_trip(request)
    _round_trip(answer)
    # Between our own processes the wire stays tolerant: a newer agent's extra field is ignored.
    assert ModelFile.from_wire({"path": "x", "present": True, "root": 2}) == ModelFile(path="x", present=True)


def test_error_envelope(snapshot_json: SnapshotAssertion) -> None:
    body = agent_error_body(
        AgentErrorCode.INVALID_REQUEST, "spec.budgetGiB: must be positive", field="spec.budgetGiB"
    )
    assert body == snapshot_json
    parsed = AgentErrorBody.from_wire(body)
    assert (parsed.error.code, parsed.error.field) == ("invalid_request", "spec.budgetGiB")
    # Distinct from the OpenAI shape, which always carries "type".
    assert "type" not in body["error"]


def test_a_passed_on_hostd_refusal_keeps_its_deny_pattern() -> None:
    # The agent answers hostd's `denied` in hostd's envelope; the master reads its pattern from it.
    hostd = {"error": {"code": "denied", "message": "ssh is a system service", "pattern": "ssh*"}}
    assert AgentErrorBody.from_wire(hostd).error.pattern == "ssh*"
    # Additive: an ordinary refusal still has no pattern on the wire.
    assert "pattern" not in agent_error_body(AgentErrorCode.MODEL_NOT_FOUND, "no such model")["error"]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (AgentErrorCode.SPEC_REJECTED, 422),
        (AgentErrorCode.ADMISSION_REFUSED, 409),
        (AgentErrorCode.START_CONFLICT, 409),
        (AgentErrorCode.MODEL_NOT_FOUND, 404),
        (AgentErrorCode.REQUEST_TOO_LARGE, 413),
        (AgentErrorCode.RUNTIME_UNAVAILABLE, 503),
        (AgentErrorCode.INVALID_REQUEST, 400),
        (AgentErrorCode.PATH_REFUSED, 403),
    ],
)
def test_error_codes_carry_the_statuses_the_spec_names(code: AgentErrorCode, status: int) -> None:
    assert code.http_status == status


def test_every_error_code_has_a_status() -> None:
    assert all(400 <= code.http_status < 600 for code in AgentErrorCode)


def test_feature_flags_are_the_spec_spellings() -> None:
    assert FeatureFlag.RUNTIME_LLAMACPP_PROCESS.value == "runtime.llamacpp.process"
    assert FeatureFlag.GGUF_INSPECT.value == "gguf.inspect"
    assert FeatureFlag.ADMISSION_GPU_BUDGETS.value == "admission.gpu-budgets"


def test_paths() -> None:
    assert (AGENT_API_PREFIX, DEFAULT_AGENT_PORT, MAX_PROXY_BODY_BYTES) == (
        "/agent/v1",
        9443,
        64 * 1024 * 1024,
    )
    assert agent_path(ROUTE_RUNTIMES) == "/agent/v1/runtimes"
    assert agent_path(ROUTE_MODEL_START, model_id="qwen3-8b") == "/agent/v1/models/qwen3-8b/start"
    # A parameter stays one segment whatever it holds.
    assert agent_path(ROUTE_MODEL_LOGS, model_id="../x") == "/agent/v1/models/..%2Fx/logs"
    assert proxy_path("tiny", "/v1/chat/completions") == "/agent/v1/proxy/tiny/v1/chat/completions"


def test_telemetry_with_host_samples_and_a_budget_sample(snapshot_json: SnapshotAssertion) -> None:
    # Additive: a host sample per pass beside the models, and a model sample whose GPU figure is its budget.
    telemetry = TelemetrySnapshot(
        taken_at=LATER,
        interval_s=5,
        models=[
            ModelTelemetry(
                model_id="a",
                samples=[
                    ModelMetrics(
                        model_id="a",
                        at=AT,
                        gpu_memory_bytes=8 * 1024**3,
                        gpu_memory_source=GPU_MEMORY_FROM_BUDGET,
                    )
                ],
            )
        ],
        host_samples=[
            HostGpuSample(
                at=AT,
                source="hostd",
                services=[
                    ServiceGpuMemory(unit="ollama.service", name="Ollama", gpu_memory_bytes=3 * 1024**3),
                    ServiceGpuMemory(unit="comfy.service", name="comfy.service"),
                ],
            ),
            HostGpuSample(at=LATER, source="nvidia-smi"),
        ],
    )
    assert telemetry.to_wire() == snapshot_json
    _round_trip(telemetry)
    # An older agent's answer has no host samples; a newer one's unknown fields are ignored.
    older = TelemetrySnapshot.from_wire({"takenAt": LATER.isoformat(), "intervalS": 5})
    assert older.host_samples == []
    newer = HostGpuSample.from_wire({"at": AT.isoformat(), "source": "x", "gpus": [0], "services": []})
    assert newer.source == "x"

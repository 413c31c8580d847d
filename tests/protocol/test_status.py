"""Statuses, memory, metrics and router counters on the wire."""

from __future__ import annotations

from datetime import UTC, datetime

from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import (
    GpuMemory,
    MemorySnapshot,
    ModelMetrics,
    ModelState,
    ModelStatus,
    RouterModelStats,
)

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_model_status_snapshot(snapshot_json: SnapshotAssertion) -> None:
    status = ModelStatus(
        id="tiny",
        served_name="tiny",
        state=ModelState.FAILED,
        runtime="llamacpp",
        node_id="local",
        port=18001,
        error="exit 1\nlast line",
        restart_pending=True,
        config_hash="0123456789abcdef",
        budget_gib=1.5,
        started_at=AT,
    )
    wire = status.to_wire()
    assert wire == snapshot_json
    assert ModelStatus.from_wire(wire) == status


def test_stopped_status_is_minimal() -> None:
    status = ModelStatus(id="m", served_name="m", state=ModelState.STOPPED)
    assert status.to_wire() == {"id": "m", "servedName": "m", "state": "Stopped"}


def test_memory_snapshot(snapshot_json: SnapshotAssertion) -> None:
    snapshot = MemorySnapshot(
        total_gib=121.0,
        available_gib=80.25,
        reserve_gib=8,
        unified=False,
        gpus=[GpuMemory(index=0, uuid="GPU-abc", name="H200", total_mib=143771, used_mib=1024)],
        taken_at=AT,
    )
    assert snapshot.to_wire() == snapshot_json
    assert MemorySnapshot.from_wire(snapshot.to_wire()) == snapshot


def test_gpu_utilization_is_additive() -> None:
    busy = GpuMemory(index=0, uuid="GPU-abc", total_mib=143771, utilization_percent=37)
    older = {"index": 0, "uuid": "GPU-abc", "totalMiB": 143771.0}  # an agent from before the field
    assert busy.to_wire() == older | {"utilizationPercent": 37.0}
    assert GpuMemory.from_wire(busy.to_wire()) == busy
    assert GpuMemory.from_wire(older).utilization_percent is None
    assert "utilizationPercent" not in GpuMemory(index=0, uuid="GPU-abc", total_mib=1).to_wire()


def test_metrics_and_router_stats(snapshot_json: SnapshotAssertion) -> None:
    metrics = ModelMetrics(
        model_id="m",
        at=AT,
        requests_running=2,
        requests_waiting=1,
        kv_cache_usage=0.25,
        prompt_tokens_total=1000,
        generation_tokens_total=5000,
        prompt_tokens_per_second=12.5,
        generation_tokens_per_second=48.0,
    )
    stats = RouterModelStats(served_name="m", total=10, failed=1, in_flight=2)
    assert {"metrics": metrics.to_wire(), "routerStats": stats.to_wire()} == snapshot_json
    assert ModelMetrics.from_wire(metrics.to_wire()) == metrics
    assert RouterModelStats.from_wire(stats.to_wire()) == stats


def test_state_values_are_the_spec_names() -> None:
    assert [state.value for state in ModelState] == [
        "Stopped",
        "Starting",
        "Ready",
        "Stopping",
        "Failed",
        "Unknown",
    ]


def test_measured_memory_is_an_additive_metrics_field(snapshot_json: SnapshotAssertion) -> None:
    measured = ModelMetrics(model_id="m", at=AT, memory_bytes=327_155_712)
    older = ModelMetrics.from_wire({"modelId": "m", "at": AT.isoformat()})
    assert measured.to_wire() == snapshot_json
    assert ModelMetrics.from_wire(measured.to_wire()) == measured
    assert older.memory_bytes is None
    assert "memoryBytes" not in older.to_wire()

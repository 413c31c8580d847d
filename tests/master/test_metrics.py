"""``/metrics``: router counters, model states, node memory and key usage in the Prometheus text format."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.master._stack import running_master

from mirbad_master._metrics import collect_metrics, render_metrics
from mirbad_orchestration.supervision import RestartPause

pytestmark = pytest.mark.anyio

GIB = 1024**3


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_expose_the_fleet_without_sign_in(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        create = {"id": "qwen", "servedName": "Qwen3-8B", "modelPath": "qwen", "memoryBudgetGiB": 16}
        await master.admin.post("/api/models", json=create)
        await master.admin.post("/api/models/qwen/start")
        secret = (await master.admin.post("/api/keys", json={"name": "ci"})).json()["secret"]
        key_id = (await master.admin.get("/api/keys")).json()[0]["id"]
        master.services.keys.record_usage(key_id, "Qwen3-8B", 10, 5)
        master.services.stats.begin("Qwen3-8B")
        master.services.stats.end("Qwen3-8B", failed=True)
        answer = await master.anonymous.get("/metrics")

    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert secret not in answer.text
    found = samples(answer.text)
    model = (("model", "Qwen3-8B"),)
    assert found[("mirbad_router_requests_total", model)] == 1
    assert found[("mirbad_router_requests_failed_total", model)] == 1
    assert found[("mirbad_router_requests_in_flight", model)] == 0
    ready = (("model", "qwen"), ("node", "local"), ("state", "Ready"))
    stopped = (("model", "qwen"), ("node", "local"), ("state", "Stopped"))
    assert found[("mirbad_model_state", ready)] == 1
    assert found[("mirbad_model_state", stopped)] == 0
    assert found[("mirbad_node_reachable", (("node", "local"),))] == 1
    assert found[("mirbad_node_memory_total_bytes", (("node", "local"),))] == 128 * GIB
    assert found[("mirbad_node_memory_available_bytes", (("node", "local"),))] == 100 * GIB
    assert key_id not in answer.text  # key ids only when asked for (metrics_key_ids)
    usage = (("model", "Qwen3-8B"),)
    assert found[("mirbad_api_key_prompt_tokens_total", usage)] == 10
    assert found[("mirbad_api_key_completion_tokens_total", usage)] == 5
    assert found[("mirbad_api_key_requests_total", usage)] == 1


async def test_key_ids_label_the_usage_only_when_asked_for(tmp_path: Path) -> None:
    async with running_master(tmp_path, metrics_key_ids=True) as master:
        for name in ("a", "b"):
            await master.admin.post("/api/keys", json={"name": name})
        ids = [key["id"] for key in (await master.admin.get("/api/keys")).json()]
        for key_id in ids:
            master.services.keys.record_usage(key_id, "m", 3, 1)
        found = samples((await master.anonymous.get("/metrics")).text)

    for key_id in ids:
        assert found[("mirbad_api_key_prompt_tokens_total", (("key_id", key_id), ("model", "m")))] == 3


async def test_without_key_ids_the_usage_of_all_keys_is_summed_per_model(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        for name in ("a", "b"):
            await master.admin.post("/api/keys", json={"name": name})
        for key in (await master.admin.get("/api/keys")).json():
            master.services.keys.record_usage(key["id"], "m", 3, 1)
        found = samples((await master.anonymous.get("/metrics")).text)

    assert found[("mirbad_api_key_prompt_tokens_total", (("model", "m"),))] == 6
    assert found[("mirbad_api_key_requests_total", (("model", "m"),))] == 2


async def test_a_pause_is_exposed(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        pause = RestartPause(
            model_id="ornith-9b-fp8", node_id="local", crashes=3, paused_at=datetime.now(UTC)
        )
        await master.services.pauses.pause(pause)
        text = render_metrics(await collect_metrics(master.services)).decode()

    assert samples(text)[("mirbad_model_restart_paused", (("model", "ornith-9b-fp8"),))] == 1

"""A Ready model that stops progressing: ``progress`` in its view and /api/status, a gauge in /metrics.

The fake agent's telemetry ring is what a wedged engine reports: a request running and the token
counter standing still for longer than the stall window. Once the counter moves again the flag clears.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.master._stack import Master, running_master
from tests.master.test_metrics import samples

from mirbad_protocol import ModelMetrics

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
MODEL = {"id": "qwen", "servedName": "Qwen3-8B", "modelPath": "qwen", "memoryBudgetGiB": 16}


def ring(start: datetime, counters: list[float]) -> list[ModelMetrics]:
    """Samples five seconds apart, one request running in each."""
    return [
        ModelMetrics(
            model_id="qwen",
            at=start + timedelta(seconds=5 * index),
            requests_running=1,
            prompt_tokens_total=10,
            generation_tokens_total=counter,
        )
        for index, counter in enumerate(counters)
    ]


async def status_of(master: Master) -> dict[str, Any]:
    [status] = [m for m in (await master.admin.get("/api/status")).json()["models"] if m["id"] == "qwen"]
    return dict(status)


async def wait_for(master: Master, progress: str | None) -> None:
    """Wait until the status reads ``progress``: the collector reads the ring every 0.2 s."""
    with anyio.fail_after(WAIT_S):
        while (await status_of(master)).get("progress") != progress:  # noqa: ASYNC110 - nothing signals it
            await anyio.sleep(0.05)


async def test_a_stalled_model_is_flagged_in_its_view_the_status_and_metrics(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await master.admin.post("/api/models", json=MODEL)
        await master.admin.post("/api/models/qwen/start")
        start = datetime.now(UTC) - timedelta(seconds=300)
        # A minute of generation, then nothing for 185 s while the request runs on.
        master.local.telemetry["qwen"] = ring(start, [40.0 * i for i in range(12)] + [440.0] * 37)
        await wait_for(master, "Stalled")

        view = (await master.admin.get("/api/models/qwen")).json()
        status = await status_of(master)
        found = samples((await master.anonymous.get("/metrics")).text)

        # Generating again: the flag clears with the next samples.
        later = start + timedelta(seconds=5 * 49)
        master.local.telemetry["qwen"] += ring(later, [480.0 + 200.0 * i for i in range(13)])
        await wait_for(master, None)
        cleared_view = (await master.admin.get("/api/models/qwen")).json()
        cleared = samples((await master.anonymous.get("/metrics")).text)

    assert view["status"]["state"] == "Ready"
    assert view["status"]["progress"] == status["progress"] == "Stalled"
    assert view["status"]["progressReason"] == "1 requests running and no tokens processed for 185 s"
    labels = (("model", "qwen"), ("node", "local"))
    assert found[("mirbad_model_progress", (*labels, ("state", "Stalled")))] == 1
    assert found[("mirbad_model_progress", (*labels, ("state", "Slow")))] == 0
    assert "progress" not in cleared_view["status"]
    assert "progressReason" not in cleared_view["status"]
    assert cleared[("mirbad_model_progress", (*labels, ("state", "Stalled")))] == 0

"""The benchmarks room: a start and a cancel through ``/api`` and through the portal read the same.

Each scenario runs on two masters, one driven over HTTP and one through the room's actions with the
portal's actor (what the Benchmark view calls); the audit lines and the refusals must match (a portal
refusal is read through the API's own table, as the page shows it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from tests._support.polling import eventually
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, TINY, WAIT_S, chat_of, chatty, ready

from mirbad_master._api_errors import Refusal
from mirbad_master.benchmarks.actions import cancel_benchmarks, start_benchmark
from mirbad_master.ui._refusals import PORTAL_ACTOR

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def benchmark_master(path: Path) -> AsyncIterator[Master]:
    options = {"benchmark_sizes": TINY, "drain_timeout_s": 2.0, "gpu_sample_s": 0.1}
    async with running_master(path, agent=chatty, services_options=options) as master:
        yield master


async def held_benchmark(master: Master, start: Callable[[], Awaitable[object]]) -> None:
    """Start a benchmark of qwen whose chats wait until it is cancelled."""
    chat_of(master).hold = anyio.Event()
    await start()
    await eventually(lambda: chat_of(master).holding > 0, timeout_s=WAIT_S)


async def test_a_start_a_cancel_and_a_finished_run_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with benchmark_master(tmp_path / "api") as master:
        api = master.admin
        await ready(master, QWEN)
        await held_benchmark(master, lambda: ok(api.post("/api/models/qwen/benchmark")))
        await ok(api.delete("/api/benchmark", params={"node": "local"}))
        chat_of(master).hold = None
        job = await ok(api.post("/api/models/qwen/benchmark", params={"preset": "interactive"}))
        await master.services.jobs.wait(job["id"], timeout_s=WAIT_S)
        through_the_api = await audit_lines(master)

    async with benchmark_master(tmp_path / "portal") as master:
        services = master.services
        await ready(master, QWEN)
        await held_benchmark(master, lambda: start_benchmark(services, "qwen", actor=PORTAL_ACTOR))
        await cancel_benchmarks(services, "local", actor=PORTAL_ACTOR)
        chat_of(master).hold = None
        started = await start_benchmark(services, "qwen", preset="interactive", actor=PORTAL_ACTOR)
        await services.jobs.wait(started.id, timeout_s=WAIT_S)
        through_the_portal = await audit_lines(master)

    benchmark_lines = [line for line in through_the_api if line[1].startswith("model.benchmark")]
    assert [line[1] for line in benchmark_lines] == [
        "model.benchmark", "model.benchmark.cancel", "model.benchmark"
    ]  # fmt: skip
    assert through_the_portal == through_the_api


async def test_refusals_read_the_same_through_the_api_and_the_portal(tmp_path: Path) -> None:
    async with benchmark_master(tmp_path / "api") as master:
        api = master.admin
        await ok(api.post("/api/models", json=QWEN))
        by_api: list[Refusal] = [
            api_refusal(await api.post("/api/models/qwen/benchmark")),
            api_refusal(await api.post("/api/models/qwen/benchmark", params={"preset": "fastest"})),
            api_refusal(await api.post("/api/models/nope/benchmark")),
            api_refusal(await api.delete("/api/benchmark", params={"node": "local"})),
        ]
        api_lines = await audit_lines(master)

    async with benchmark_master(tmp_path / "portal") as master:
        services = master.services
        await ok(master.admin.post("/api/models", json=QWEN))
        by_portal = [
            await portal_refusal(lambda: start_benchmark(services, "qwen", actor=PORTAL_ACTOR)),
            await portal_refusal(
                lambda: start_benchmark(services, "qwen", preset="fastest", actor=PORTAL_ACTOR)
            ),
            await portal_refusal(lambda: start_benchmark(services, "nope", actor=PORTAL_ACTOR)),
            await portal_refusal(lambda: cancel_benchmarks(services, "local", actor=PORTAL_ACTOR)),
        ]
        portal_lines = await audit_lines(master)

    assert [(r.status, r.code) for r in by_api] == [
        (409, "model_not_ready"), (422, "unknown_preset"), (404, "model_not_found"), (404, "job_not_found")
    ]  # fmt: skip
    assert by_portal == by_api
    assert portal_lines == api_lines  # a refused start or cancel is not audited, whoever asks

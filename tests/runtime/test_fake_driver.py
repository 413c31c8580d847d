"""mirbad_runtime.testing.FakeDriver: the in-memory driver callers test against."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

from mirbad_protocol import ContainerLaunch, ModelState
from mirbad_runtime.exceptions import LaunchRejectedError, ModelNotFoundError
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio


def _spec(model_id: str = "m1", **changes: Any) -> ContainerLaunch:
    fields: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "runtime": "vllm",
        "image": "vllm/vllm-openai:latest",
        "argv": ["--model", "/models/x"],
        "model_path": "x",
        "budget_gib": 8.0,
        "config_hash": "0123456789abcdef",
        **changes,
    }
    return ContainerLaunch(**fields)


async def test_start_status_and_stop() -> None:
    driver = FakeDriver(port_range_start=9000)
    first = await driver.start(_spec("a"))
    second = await driver.start(_spec("b"))
    again = await driver.start(_spec("a"))

    assert (first.state, first.port, second.port, again.port) == (ModelState.READY, 9000, 9001, 9000)
    assert [status.id for status in await driver.list_statuses()] == ["a", "b"]
    assert await driver.upstream_url("b") == "http://127.0.0.1:9001/"

    await driver.stop("a")

    assert (await driver.status("a")).state is ModelState.STOPPED
    assert driver.stops == ["a"]
    assert len(driver.starts) == 3


async def test_a_failed_model_starts_again_and_a_queued_failure_is_raised_once() -> None:
    driver = FakeDriver(start_state=ModelState.STARTING)
    await driver.start(_spec())
    driver.set_state("m1", ModelState.FAILED, error="boom")
    failed = await driver.status("m1")
    driver.fail_next_start(LaunchRejectedError("no port"))

    with pytest.raises(LaunchRejectedError):
        await driver.start(_spec())
    restarted = await driver.start(_spec())

    assert (failed.state, failed.error) == (ModelState.FAILED, "boom")
    assert (restarted.state, restarted.error) == (ModelState.STARTING, None)


async def test_logs_follow_until_the_model_stops() -> None:
    driver = FakeDriver()
    await driver.start(_spec())
    driver.add_log("m1", "one")
    seen: list[str] = []

    async def follow() -> None:
        async with contextlib.aclosing(driver.follow_logs("m1", tail=1)) as lines:
            async for line in lines:
                seen.append(line)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            driver.add_log("m1", "two")
            await anyio.wait_all_tasks_blocked()
            await driver.stop("m1")

    assert seen == ["one", "two"]


async def test_an_unknown_model_has_no_logs_and_no_upstream() -> None:
    async with FakeDriver() as driver:
        with pytest.raises(ModelNotFoundError):
            await driver.logs("ghost")
        with pytest.raises(ModelNotFoundError):
            await driver.upstream_url("ghost")
        driver_status = await driver.status("ghost")
        adopted = await driver.adopt()

    assert driver_status.state is ModelState.STOPPED
    assert adopted == []
    assert driver.closed


async def test_set_upstream_points_the_proxy_elsewhere() -> None:
    driver = FakeDriver()
    await driver.start(_spec())
    driver.set_upstream("m1", "http://127.0.0.1:5555")

    assert await driver.upstream_url("m1") == "http://127.0.0.1:5555/"

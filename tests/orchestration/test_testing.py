"""The fakes mirbad_orchestration ships for tests: FakeRuntime and FakeClock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from mirbad_orchestration.exceptions import NodeUnreachableError, UnknownNodeError
from mirbad_orchestration.testing import FakeClock, FakeRuntime, StartCall
from mirbad_protocol import ModelDefinition, ModelState, Placement

pytestmark = pytest.mark.anyio


def _model(model_id: str, node: str | None = None) -> ModelDefinition:
    return ModelDefinition(
        id=model_id,
        served_name=model_id,
        model_path=f"org/{model_id}",
        placement=Placement(node_id=node) if node else None,
    )


async def test_sleepers_wake_in_deadline_order_at_their_time() -> None:
    clock = FakeClock(datetime(2025, 1, 1, tzinfo=UTC))
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, (clock.now() - datetime(2025, 1, 1, tzinfo=UTC)).total_seconds()))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sleeper, "late", 30)
        tasks.start_soon(sleeper, "early", 10)
        tasks.start_soon(sleeper, "never", 100)
        await clock.advance(29)
        assert woke == [("early", 10.0)]
        await clock.advance(1)
        assert woke == [("early", 10.0), ("late", 30.0)]
        tasks.cancel_scope.cancel()
    assert clock.now() == datetime(2025, 1, 1, 0, 0, 30, tzinfo=UTC)


async def test_the_clock_serves_as_a_store_clock_and_moves_by_a_timedelta() -> None:
    start = datetime(2025, 3, 1, tzinfo=UTC)
    clock = FakeClock(start)
    stamp: Callable[[], datetime] = clock  # what a store's clock= takes

    await clock.advance(timedelta(minutes=5))
    await clock.advance(30)

    assert stamp() == clock.now() == start + timedelta(minutes=5, seconds=30)


async def test_models_start_on_their_placement_or_the_default_node() -> None:
    runtime = FakeRuntime(("a", "b"), start_state=ModelState.READY)
    await runtime.start(_model("m1"))
    await runtime.start(_model("m2", "b"), force=True)
    assert runtime.starts == [StartCall("a", "m1", False), StartCall("b", "m2", True)]
    assert [(s.node_id, s.id, s.state) for s in await runtime.statuses()] == [
        ("a", "m1", ModelState.READY),
        ("b", "m2", ModelState.READY),
    ]
    assert (await runtime.start(_model("m1"))).state is ModelState.READY  # already running: left alone


async def test_an_unreachable_node_raises_and_is_left_out_of_the_fleet_view() -> None:
    runtime = FakeRuntime(("a", "b"))
    await runtime.start(_model("m1", "a"))
    runtime.set_reachable("a", False)
    assert await runtime.statuses() == []
    with pytest.raises(NodeUnreachableError):
        await runtime.statuses("a")
    with pytest.raises(NodeUnreachableError):
        await runtime.status("m1")
    with pytest.raises(UnknownNodeError):
        await runtime.statuses("nowhere")
    assert [(n.node_id, n.reachable) for n in await runtime.nodes()] == [("a", False), ("b", True)]


async def test_a_reboot_loses_the_models_and_changes_the_boot_id() -> None:
    runtime = FakeRuntime()
    await runtime.start(_model("m"))
    [before] = await runtime.nodes()
    runtime.reboot("local")
    [after] = await runtime.nodes()
    assert before.boot_id != after.boot_id
    assert (await runtime.status("m")).state is ModelState.STOPPED

"""Per-node start lanes: one launch at a time per node, nodes independent, waits bounded."""

from __future__ import annotations

import anyio
import pytest

from mirbad_orchestration.exceptions import StartLaneBusyError
from mirbad_orchestration.supervision import StartLanes
from mirbad_orchestration.testing import FakeClock

pytestmark = pytest.mark.anyio


async def test_a_node_starts_one_model_at_a_time_and_in_order() -> None:
    lanes = StartLanes()
    release = anyio.Event()
    entered: list[str] = []

    async def launch(model_id: str) -> None:
        async with lanes.hold("a", holder=model_id):
            entered.append(model_id)
            await release.wait()

    async with anyio.create_task_group() as tasks:
        for model_id in ("m1", "m2", "m3"):
            tasks.start_soon(launch, model_id)
            await FakeClock.settle()
        assert entered == ["m1"]
        assert lanes.holder("a") == "m1"
        release.set()
    assert entered == ["m1", "m2", "m3"]
    assert lanes.holder("a") is None


async def test_nodes_have_independent_lanes() -> None:
    lanes = StartLanes()
    release = anyio.Event()
    holders: dict[str, str | None] = {}

    async def launch(node_id: str) -> None:
        async with lanes.hold(node_id, holder=f"model-on-{node_id}"):
            await release.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(launch, "a")
        tasks.start_soon(launch, "b")
        await FakeClock.settle()
        holders = {node: lanes.holder(node) for node in ("a", "b")}
        release.set()
    assert holders == {"a": "model-on-a", "b": "model-on-b"}


async def test_a_wait_past_its_bound_raises_naming_the_holder() -> None:
    lanes = StartLanes()
    release = anyio.Event()

    async def hold_until_released() -> None:
        async with lanes.hold("a", holder="big-model"):
            await release.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(hold_until_released)
        await FakeClock.settle()
        with pytest.raises(StartLaneBusyError) as caught:
            async with lanes.hold("a", holder="other", wait=0.01):
                pytest.fail("the body of a lane never acquired must not run")
        release.set()
    assert caught.value.node_id == "a"
    assert caught.value.holder == "big-model"
    assert "starting 'big-model'" in str(caught.value)
    # The lane is free again afterwards, for the next launch.
    async with lanes.hold("a", holder="other", wait=0.01):
        assert lanes.holder("a") == "other"


async def test_a_cancelled_wait_leaves_the_lane_usable() -> None:
    lanes = StartLanes()
    release = anyio.Event()

    async def hold_until_released() -> None:
        async with lanes.hold("a", holder="first"):
            await release.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(hold_until_released)
        await FakeClock.settle()
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with lanes.hold("a", holder="cancelled"):
                pytest.fail("a cancelled waiter must not get the lane")
        release.set()
    async with lanes.hold("a", holder="next", wait=0.01):
        assert lanes.holder("a") == "next"


async def test_the_body_failing_releases_the_lane() -> None:
    lanes = StartLanes()
    with pytest.raises(RuntimeError):
        async with lanes.hold("a", holder="broken"):
            raise RuntimeError("start failed")
    assert lanes.holder("a") is None
    async with lanes.hold("a", holder="next", wait=0.01):
        pass

"""The health monitor against a fake fleet and virtual time: every wait is a FakeClock step."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import pytest

from mirbad_orchestration.exceptions import NodeConflictError, NodeNotReadyToStartError, StateFileError
from mirbad_orchestration.stores import AuditEntry, AuditLog
from mirbad_orchestration.supervision import (
    HealthMonitor,
    HealthSettings,
    RecoveryState,
    RestartPause,
    RestartPauses,
)
from mirbad_orchestration.testing import FakeClock, FakeRuntime
from mirbad_protocol import ModelDefinition, ModelState, Placement

pytestmark = pytest.mark.anyio

READY, FAILED, STOPPED, STARTING = (
    ModelState.READY,
    ModelState.FAILED,
    ModelState.STOPPED,
    ModelState.STARTING,
)
POLL = 5.0  # every test moves time in whole polls unless it says otherwise


def model(model_id: str, node: str | None = None, *, auto_start: bool = False) -> ModelDefinition:
    return ModelDefinition(
        id=model_id,
        served_name=model_id,
        model_path=f"org/{model_id}",
        placement=Placement(node_id=node) if node else None,
        auto_start=auto_start,
    )


@dataclass
class Disk:
    """The recovery file's disk: while ``full``, every write of it fails as a full disk does."""

    full: bool = False

    def write(self, temp: Path) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temp))


@dataclass
class Fleet:
    """A fake fleet, its master-side stores in ``data`` and a way to run monitors over them."""

    data: Path
    models: list[ModelDefinition]
    nodes: tuple[str, ...] = ("local",)
    settings: HealthSettings = field(default_factory=lambda: HealthSettings(poll_interval=POLL))
    owned: set[str] = field(default_factory=set)
    last_used: dict[str, datetime] = field(default_factory=dict)
    clock: FakeClock = field(default_factory=FakeClock)
    disk: Disk = field(default_factory=Disk)

    def __post_init__(self) -> None:
        self.runtime = FakeRuntime(self.nodes, clock=self.clock.now)
        self.audit = AuditLog(self.data, clock=self.clock.now)

    async def definitions(self) -> list[ModelDefinition]:
        return list(self.models)

    def monitor(self) -> HealthMonitor:
        """A new monitor with new store objects, as after a master restart."""
        return HealthMonitor(
            self.runtime,
            self.definitions,
            recovery=RecoveryState(self.data, before_replace=self.disk.write),
            pauses=RestartPauses(self.data),
            audit=self.audit,
            settings=self.settings,
            skip=lambda model_id, node_id: model_id in self.owned,
            last_used=self.last_used.get,
            clock=self.clock.now,
            sleep=self.clock.sleep,
        )

    @asynccontextmanager
    async def running(self, monitor: HealthMonitor | None = None) -> AsyncIterator[HealthMonitor]:
        monitor = monitor or self.monitor()
        async with anyio.create_task_group() as tasks:
            await tasks.start(monitor.run)
            await self.clock.settle()
            yield monitor
            tasks.cancel_scope.cancel()

    def started(self) -> list[str]:
        return [call.model_id for call in self.runtime.starts]

    async def audited(self) -> list[AuditEntry]:
        return await self.audit.read(self.clock.now().date())

    async def crash(
        self, model_id: str, state: ModelState = FAILED, error: str = "CUDA out of memory"
    ) -> None:
        """Crash the model and let one poll see it."""
        self.runtime.set_state(model_id, state, error=error if state is FAILED else None)
        await self.clock.advance(POLL)

    async def ready(self, model_id: str, wait: float = POLL) -> None:
        self.runtime.set_state(model_id, READY)
        await self.clock.advance(wait)


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="mirbad_orchestration.health")
    return caplog


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mirbad_orchestration.health"]


# ---------------------------------------------------------------------- transitions


async def test_state_transitions_are_logged_one_line_each(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet(tmp_path, [model("m")], settings=HealthSettings(poll_interval=POLL, crash_restart=False))
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.clock.advance(POLL)
        await fleet.ready("m")
        await fleet.crash("m", error="engine died\nRuntimeError: CUDA out of memory")
    lines = [line for line in messages(caplog_info) if line.startswith("model m on local:")]
    assert lines == [
        "model m on local: Starting -> Ready",
        "model m on local: Ready -> Failed (RuntimeError: CUDA out of memory)",
    ]


async def test_reachability_changes_are_logged_and_do_not_look_like_crashes(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        fleet.runtime.set_reachable("local", False)
        await fleet.clock.advance(60)
        fleet.runtime.set_reachable("local", True)
        await fleet.clock.advance(60)
    assert "node local: unreachable" in messages(caplog_info)
    assert "node local: reachable" in messages(caplog_info)
    assert fleet.started() == ["m"]
    assert fleet.runtime.running("local") == {"m": READY}


# ---------------------------------------------------------------------- crash restarts


async def test_crash_restarts_back_off_10_30_60_seconds(tmp_path: Path) -> None:
    settings = HealthSettings(poll_interval=POLL, ready_check_interval=1.0, crash_restart_limit=5)
    fleet = Fleet(tmp_path, [model("m")], settings=settings)
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await fleet.crash("m")  # crash 1, seen by this poll
        for backoff in (10, 30, 60, 60):
            starts = len(fleet.started())
            await fleet.clock.advance(backoff - 1)
            assert len(fleet.started()) == starts, f"restarted before {backoff}s"
            await fleet.clock.advance(1)
            assert len(fleet.started()) == starts + 1, f"not restarted after {backoff}s"
            # The restarted model fails while starting: the launch sees it at its next check.
            fleet.runtime.set_state("m", FAILED, error="again")
            await fleet.clock.advance(settings.ready_check_interval)
        await fleet.clock.advance(600)
    assert fleet.started() == ["m"] * 5
    assert (await RestartPauses(tmp_path).get("m")) is not None  # the 5th crash paused it
    restarts = [
        e for e in await fleet.audited() if e.actor == "system:autostart" and e.action == "model.start"
    ]
    assert [(e.target, e.outcome, e.node_id) for e in restarts] == [("m", "ok", "local")] * 4


async def test_ready_to_stopped_without_a_stop_is_a_crash(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await fleet.crash("m", STOPPED)
        await fleet.clock.advance(10)
    assert fleet.started() == ["m", "m"]


async def test_an_explicit_stop_is_never_restarted(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await monitor.control.stop("m", actor="user:admin")
        await fleet.clock.advance(300)
    assert fleet.started() == ["m"]
    assert await RecoveryState(tmp_path).running("local") == frozenset()
    assert [(e.actor, e.action, e.outcome) for e in await fleet.audited()] == [
        ("user:admin", "model.start", "ok"),
        ("user:admin", "model.stop", "ok"),
    ]


async def test_with_the_disk_full_a_stop_still_stops_and_says_which_file_failed(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    recovery = RecoveryState(tmp_path)
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        fleet.disk.full = True
        with pytest.raises(StateFileError) as refused:
            await monitor.control.stop("m", actor="user:admin")
        await fleet.clock.advance(300)  # the stop is not taken for a crash meanwhile
        still_listed = await recovery.running("local")
        fleet.disk.full = False
        await fleet.clock.advance(POLL)

    assert fleet.runtime.stops == ["m"]
    assert fleet.runtime.running("local") == {}
    assert fleet.started() == ["m"]
    assert refused.value.disk_full
    assert refused.value.path == recovery.path
    assert "'m' was stopped" in str(refused.value)
    assert still_listed == frozenset({"m"})  # the file as it was: memory never ran ahead of it
    assert await RecoveryState(tmp_path).running("local") == frozenset()  # written once it could be


async def test_with_the_disk_full_a_start_is_refused_before_it_reaches_the_node(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        fleet.disk.full = True
        with pytest.raises(StateFileError) as refused:
            await monitor.control.start(fleet.models[0], actor="user:admin")

    assert refused.value.disk_full
    assert fleet.started() == []


async def test_a_stop_during_the_backoff_cancels_the_restart(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await fleet.crash("m")
        await monitor.control.stop("m", actor="user:admin")
        await fleet.clock.advance(300)
    assert fleet.started() == ["m"]


async def test_an_unlisted_model_is_not_restarted(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    await fleet.runtime.start(fleet.models[0])  # started behind the master's back
    async with fleet.running():
        await fleet.ready("m")
        await fleet.crash("m")
        await fleet.clock.advance(300)
    assert fleet.started() == ["m"]


async def test_crash_restart_can_be_turned_off(tmp_path: Path, caplog_info: pytest.LogCaptureFixture) -> None:
    fleet = Fleet(tmp_path, [model("m")], settings=HealthSettings(poll_interval=POLL, crash_restart=False))
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await fleet.crash("m")
        await fleet.clock.advance(300)
    assert fleet.started() == ["m"]
    assert "model m on local crashed; automatic restarts are off" in messages(caplog_info)


async def test_restarts_that_fail_because_the_node_is_down_do_not_count(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await fleet.crash("m")  # crash 1: restart in 10 s
        fleet.runtime.set_reachable("local", False)
        await fleet.clock.advance(10 * 5)  # five attempts, none counted
        fleet.runtime.set_reachable("local", True)
        await fleet.clock.advance(10)
    assert fleet.started() == ["m", "m"]
    assert await RestartPauses(tmp_path).list() == []
    retries = [line for line in messages(caplog_info) if "node not answering" in line]
    assert len(retries) == 5
    assert retries[0].endswith("retrying in 10s")


async def test_a_start_the_node_cannot_do_yet_is_tried_each_poll_and_never_counted(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m", auto_start=True)])
    for _ in range(5):  # more refusals than the crash limit (3) would allow before a pause
        fleet.runtime.fail_next_start(
            NodeNotReadyToStartError("local", 409, "llama_server_not_built", "llama-server is being built")
        )
    async with fleet.running():
        await fleet.clock.advance(POLL * 5)  # one try a poll: the boot's own, then five more
        await fleet.ready("m")
    assert fleet.started() == ["m"] * 6
    assert fleet.runtime.running("local") == {"m": READY}
    assert await RestartPauses(tmp_path).list() == []
    # Nothing was started by the refused tries, so only the start that happened is audited.
    starts = [(e.actor, e.outcome) for e in await fleet.audited() if e.action == "model.start"]
    assert starts == [("system:autostart", "ok")]


# ---------------------------------------------------------------------- pauses


async def test_three_crashes_in_a_row_pause_restarts_and_a_new_monitor_keeps_the_pause(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet(tmp_path, [model("m", auto_start=True)])
    async with fleet.running():
        assert fleet.started() == ["m"]  # boot auto-start
        await fleet.ready("m")
        await fleet.crash("m")  # 1: restart in 10 s, which the node refuses
        fleet.runtime.fail_next_start(NodeConflictError("local", 409, "start_conflict", "another start runs"))
        await fleet.clock.advance(10)  # 2: restart in 30 s, which fails while starting
        await fleet.clock.advance(30)
        fleet.runtime.set_state("m", FAILED, error="Traceback ...\nValueError: bad config")
        await fleet.clock.advance(HealthSettings().ready_check_interval)  # 3: paused
        paused_at = fleet.clock.now()
        await fleet.clock.advance(600)
    assert fleet.started() == ["m"] * 3
    assert fleet.runtime.running("local") == {"m": FAILED}
    expected = RestartPause(
        model_id="m",
        node_id="local",
        crashes=3,
        last_error="Traceback ...\nValueError: bad config",
        paused_at=paused_at,
    )
    assert await RestartPauses(tmp_path).list() == [expected]
    assert (
        "model m on local crashed 3 times in a row: automatic restarts paused (ValueError: bad config)"
        in (messages(caplog_info))
    )
    failed = [e for e in await fleet.audited() if e.outcome == "failed"]
    assert [(e.actor, e.detail) for e in failed] == [("system:autostart", "node 'local': another start runs")]

    # A master restart: the new monitor reads the pause and neither auto-starts nor restarts the model.
    async with fleet.running():
        await fleet.clock.advance(600)
    assert fleet.started() == ["m"] * 3


async def test_a_start_by_hand_clears_the_pause_and_the_count(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        for _ in range(2):
            await fleet.crash("m")
            await fleet.clock.advance(30)
        await fleet.crash("m")  # the third crash in a row
        assert await RestartPauses(tmp_path).get("m") is not None

        await monitor.control.start(fleet.models[0], actor="user:admin")
        assert await RestartPauses(tmp_path).list() == []
        await fleet.ready("m")
        await fleet.crash("m")
        starts = len(fleet.started())
        await fleet.clock.advance(10)  # the first backoff again: the count started over
    assert len(fleet.started()) == starts + 1


async def test_ten_minutes_of_ready_clear_a_pause(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    pause = RestartPause(model_id="m", node_id="local", crashes=3, paused_at=fleet.clock.now())
    await RestartPauses(tmp_path).pause(pause)
    await fleet.runtime.start(fleet.models[0])
    fleet.runtime.set_state("m", READY)  # started again behind the monitor's back
    async with fleet.running():  # first sees it Ready now
        await fleet.clock.advance(595)
        assert await RestartPauses(tmp_path).list() == [pause]
        await fleet.clock.advance(POLL)
        assert await RestartPauses(tmp_path).list() == []


async def test_ten_minutes_of_ready_reset_the_crash_count(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
        await fleet.crash("m")
        await fleet.clock.advance(10)  # restart 1
        await fleet.ready("m", wait=605)  # first seen Ready one poll after it became Ready
        await fleet.crash("m")
        starts = len(fleet.started())
        await fleet.clock.advance(10)
    assert len(fleet.started()) == starts + 1  # 10 s again, not 30 s


# ---------------------------------------------------------------------- boot and reboot


async def test_boot_auto_start_runs_one_model_at_a_time_per_node_and_nodes_in_parallel(
    tmp_path: Path,
) -> None:
    models = [
        model("a1", "a", auto_start=True),
        model("a2", "a", auto_start=True),
        model("a3", "a"),
        model("b1", "b", auto_start=True),
    ]
    fleet = Fleet(
        tmp_path,
        models,
        nodes=("a", "b"),
        settings=HealthSettings(poll_interval=POLL, ready_check_interval=1),
    )
    async with fleet.running():
        assert sorted(fleet.started()) == ["a1", "b1"]
        await fleet.clock.advance(30)
        assert sorted(fleet.started()) == ["a1", "b1"]  # a2 waits for a1
        fleet.runtime.set_state("a1", READY)
        await fleet.clock.advance(1)
        assert sorted(fleet.started()) == ["a1", "a2", "b1"]
        await fleet.ready("a2")
        await fleet.ready("b1")
    assert fleet.runtime.running("a") == {"a1": READY, "a2": READY}
    assert fleet.runtime.running("b") == {"b1": READY}
    assert await RecoveryState(tmp_path).snapshot() == {"a": ["a1", "a2"], "b": ["b1"]}
    autostarts = [e.target for e in await fleet.audited() if e.actor == "system:autostart"]
    assert sorted(autostarts) == ["a1", "a2", "b1"]


async def test_a_model_that_never_gets_ready_frees_the_lane_after_the_startup_timeout(tmp_path: Path) -> None:
    settings = HealthSettings(poll_interval=POLL, startup_timeout=120, ready_check_interval=1)
    fleet = Fleet(
        tmp_path, [model("slow", auto_start=True), model("next", auto_start=True)], settings=settings
    )
    async with fleet.running():
        await fleet.clock.advance(119)
        assert fleet.started() == ["slow"]
        await fleet.clock.advance(1)
    assert fleet.started() == ["slow", "next"]


async def test_auto_start_skips_models_already_running(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m", auto_start=True)])
    await fleet.runtime.start(fleet.models[0])
    async with fleet.running():
        await fleet.clock.advance(60)
    assert fleet.started() == ["m"]


async def test_a_rebooted_node_gets_its_previous_running_set_back(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    models = [model("m1"), model("m2"), model("m3"), model("other", "b")]
    settings = HealthSettings(poll_interval=POLL, ready_check_interval=1)
    fleet = Fleet(tmp_path, models, nodes=("local", "b"), settings=settings)
    async with fleet.running() as monitor:
        for definition in models:
            await monitor.control.start(definition, actor="user:admin")
            fleet.runtime.set_state(definition.id, READY)
        await monitor.control.stop("m3", actor="user:admin")
        await fleet.clock.advance(POLL)
        fleet.runtime.reboot("local")
        await fleet.clock.advance(POLL)
        assert fleet.started()[4:] == ["m1"]  # one at a time through the lane
        await fleet.ready("m1", wait=1)
        assert fleet.started()[4:] == ["m1", "m2"]
        await fleet.ready("m2")
        await fleet.clock.advance(120)
    assert fleet.runtime.running("local") == {"m1": READY, "m2": READY}
    assert not [line for line in messages(caplog_info) if "crashed" in line]
    assert "node local: booted since last seen (boot id local-boot-1 -> local-boot-2)" in messages(
        caplog_info
    )


async def test_a_node_rebooted_while_the_master_was_down_is_relaunched(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
    fleet.runtime.reboot("local")
    async with fleet.running():
        pass
    assert fleet.started() == ["m", "m"]


async def test_a_master_restart_without_a_node_reboot_relaunches_nothing(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")
    async with fleet.running():
        await fleet.clock.advance(60)
    assert fleet.started() == ["m"]


# ---------------------------------------------------------------------- skipping and idle unload


async def test_models_owned_by_a_job_are_neither_restarted_nor_auto_started(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m"), model("auto", auto_start=True)])
    fleet.owned.update({"m", "auto"})
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")  # a start by hand is never skipped
        await fleet.ready("m")
        await fleet.crash("m", STOPPED)  # the tuning run replaced the container
        await fleet.clock.advance(300)
    assert fleet.started() == ["m"]


async def test_an_idle_model_is_unloaded_as_an_explicit_stop(tmp_path: Path) -> None:
    settings = HealthSettings(poll_interval=POLL, idle_ttls={"m": 300})
    fleet = Fleet(tmp_path, [model("m"), model("busy")], settings=settings)
    async with fleet.running() as monitor:
        start = fleet.clock.now()
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m")  # Ready since start + 5 s
        fleet.last_used["m"] = start + timedelta(seconds=100)
        await fleet.clock.advance(390)  # 395 s: 295 s since the last request
        assert fleet.runtime.stops == []
        await fleet.clock.advance(POLL)
        assert fleet.runtime.stops == ["m"]
        await fleet.clock.advance(300)
    assert fleet.started() == ["m"]  # not taken for a crash
    assert await RecoveryState(tmp_path).running("local") == frozenset()
    assert [(e.actor, e.action) for e in await fleet.audited()][-1] == ("system:idle-unload", "model.stop")


async def test_a_model_without_a_ttl_is_never_unloaded(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")], settings=HealthSettings(poll_interval=POLL, idle_ttls={"x": 1}))
    async with fleet.running() as monitor:
        await monitor.control.start(fleet.models[0], actor="user:admin")
        await fleet.ready("m", wait=3600)
    assert fleet.runtime.stops == []


# ---------------------------------------------------------------------- starts by hand


async def test_a_refused_start_by_hand_is_audited_and_not_listed(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    fleet.runtime.fail_next_start(NodeConflictError("local", 409, "memory_admission", "needs 8 GiB"))
    monitor = fleet.monitor()
    with pytest.raises(NodeConflictError):
        await monitor.control.start(fleet.models[0], actor="user:admin", force=False)
    assert await RecoveryState(tmp_path).running("local") == frozenset()
    [entry] = await fleet.audited()
    assert (entry.actor, entry.action, entry.outcome, entry.detail) == (
        "user:admin",
        "model.start",
        "failed",
        "node 'local': needs 8 GiB",
    )


async def test_restart_by_hand_lists_and_audits(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, [model("m")])
    monitor = fleet.monitor()
    status = await monitor.control.restart(fleet.models[0], actor="user:admin", force=True)
    assert status.state is STARTING
    assert fleet.runtime.starts[-1].force
    assert await RecoveryState(tmp_path).running("local") == {"m"}
    assert [(e.action, e.outcome) for e in await fleet.audited()] == [("model.restart", "ok")]

"""The one node job runner, driven by a kind written here (as restores and moves will plug in).

One job at a time per node whatever its kind, the node held in maintenance while the work runs and
released before the job ends, progress becoming the node's Retry-After, and every way a job ends:
success, failure, a lost model, a cancel, the master stopping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from tests._support.polling import eventually

from mirbad_orchestration import JobConflictError, MirbadOrchestrationError, NoJobRunningError
from mirbad_orchestration.jobs import (
    JobEnd,
    JobHost,
    JobKind,
    JobTarget,
    JobWork,
    MaintenanceState,
    NodeJobs,
    NodeModel,
    RunningJob,
)
from mirbad_protocol import GpuMemory, ModelMetrics, ModelState, WireModel
from mirbad_protocol.benchmarks import JobState

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
STARTED = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


class RestoreView(WireModel):
    """A wire view of the test's kind: the common progress fields and one of its own."""

    id: str
    model_id: str
    node_id: str
    state: JobState = "running"
    phase: str = "queued"
    eta_s: float | None = None
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
    result: str | None = None
    files: int = 0


RESTORE = JobKind[RestoreView](name="restore", label="a restore", noun="restore job")
MOVE = JobKind[RestoreView](name="move", label="a move", noun="move job")


class Host(JobHost):
    async def target(self, model_id: str) -> JobTarget:
        return JobTarget(model_id, model_id.title(), "gpu-1", "vllm", ModelState.READY)

    async def node_models(self, node_id: str) -> list[NodeModel]:
        return [NodeModel("qwen", "Qwen", ready=True), NodeModel("llama", "Llama", ready=False)]

    def latest_metrics(self, model_id: str) -> ModelMetrics | None:
        return None

    async def gpus(self, node_id: str) -> list[GpuMemory]:
        return []


@dataclass
class Work(JobWork[RestoreView]):
    """Reports a step, then waits for the test; what it does at the end is the test's to choose."""

    maintenance: MaintenanceState
    release: anyio.Event = field(default_factory=anyio.Event)
    raises: Exception | None = None
    lose: str | None = None
    held_while_running: bool = False
    concluded: list[JobEnd] = field(default_factory=list)

    async def run(self, job: RunningJob[RestoreView]) -> str | None:
        await job.report(phase="copying", files=3, eta_s=42.4)
        self.held_while_running = self.maintenance.owns("qwen")
        if self.lose is not None:
            job.fail(self.lose)
        await self.release.wait()
        if self.raises is not None:
            raise self.raises
        return "20260301T100000Z.json"

    async def conclude(self, job: RunningJob[RestoreView], end: JobEnd) -> str | None:
        self.concluded.append(end)
        assert not self.maintenance.owns("qwen"), "the node is released before the job concludes"
        return None


@pytest.fixture
async def runner(tmp_path: Path) -> AsyncIterator[NodeJobs]:
    jobs = NodeJobs(Host(), MaintenanceState(tmp_path), clock=lambda: STARTED)
    async with anyio.create_task_group() as tasks:
        await tasks.start(jobs.run)
        yield jobs
        tasks.cancel_scope.cancel()


def view(job_id: str = "r1", node_id: str = "gpu-1") -> RestoreView:
    return RestoreView(id=job_id, model_id="qwen", node_id=node_id, eta_s=60, started_at=STARTED)


async def test_a_job_holds_its_node_reports_progress_and_ends_after_releasing_it(runner: NodeJobs) -> None:
    work = Work(runner.maintenance)
    runner.launch(RESTORE, view(), work)

    await eventually(lambda: runner.jobs(RESTORE)[0].view.phase == "copying", timeout_s=WAIT_S)
    held = runner.maintenance.document.nodes["gpu-1"]
    assert (held.message, held.retry_after_s) == ("a restore of 'qwen' is running on node 'gpu-1'", 42)
    assert (held.model_ids, held.served_names) == (["qwen", "llama"], ["Qwen", "Llama"])
    work.release.set()
    ended = await runner.wait(RESTORE, "r1", timeout_s=WAIT_S)

    assert work.held_while_running
    assert (ended.state, ended.error, ended.result, ended.eta_s, ended.files) == (
        "succeeded", None, "20260301T100000Z.json", 0.0, 3
    )  # fmt: skip
    assert ended.finished_at == STARTED
    assert work.concluded == [JobEnd("succeeded")]
    assert runner.maintenance.document.empty


async def test_one_job_at_a_time_per_node_whatever_its_kind(runner: NodeJobs) -> None:
    work = Work(runner.maintenance)
    runner.launch(RESTORE, view(), work)

    with pytest.raises(JobConflictError) as refused:
        runner.launch(MOVE, view("m1"), Work(runner.maintenance))
    runner.launch(MOVE, view("m2", node_id="gpu-2"), Work(runner.maintenance))  # another node is free

    assert "r1" in str(refused.value)
    assert [job.view.id for job in runner.jobs(MOVE)] == ["m2"]
    assert runner.running_on("gpu-1") is not None
    await runner.cancel(MOVE, None, timeout_s=WAIT_S)
    work.release.set()
    await runner.wait(RESTORE, "r1", timeout_s=WAIT_S)
    runner.launch(MOVE, view("m3"), Work(runner.maintenance))  # its node is free again


async def test_a_failure_a_lost_model_and_a_cancel_end_the_job_so(runner: NodeJobs) -> None:
    failing = Work(runner.maintenance, raises=RuntimeError("disk full"))
    failing.release.set()
    lost = Work(runner.maintenance, lose="model 'qwen' was deleted")
    cancelled = Work(runner.maintenance)

    runner.launch(RESTORE, view("a"), failing)
    first = await runner.wait(RESTORE, "a", timeout_s=WAIT_S)
    runner.launch(RESTORE, view("b"), lost)
    second = await runner.wait(RESTORE, "b", timeout_s=WAIT_S)
    runner.launch(RESTORE, view("c"), cancelled)
    await eventually(lambda: cancelled.held_while_running, timeout_s=WAIT_S)
    [third] = await runner.cancel(RESTORE, "gpu-1", timeout_s=WAIT_S)

    assert (first.state, first.error) == ("failed", "disk full")
    assert (second.state, second.error) == ("failed", "model 'qwen' was deleted")
    assert (third.state, third.error) == ("cancelled", "cancelled")
    assert [w.concluded for w in (failing, lost, cancelled)] == [
        [JobEnd("failed", "disk full")],
        [JobEnd("failed", "model 'qwen' was deleted")],
        [JobEnd("cancelled", "cancelled")],
    ]
    assert runner.maintenance.document.empty
    with pytest.raises(NoJobRunningError, match="no restore job is running on node 'gpu-1'"):
        await runner.cancel(RESTORE, "gpu-1", timeout_s=WAIT_S)
    with pytest.raises(NoJobRunningError, match="no restore job 'zz'"):
        await runner.wait(RESTORE, "zz", timeout_s=WAIT_S)


async def test_the_master_stopping_ends_a_job_and_releases_its_node(tmp_path: Path) -> None:
    jobs = NodeJobs(Host(), MaintenanceState(tmp_path), clock=lambda: STARTED)
    work = Work(jobs.maintenance)
    async with anyio.create_task_group() as tasks:
        await tasks.start(jobs.run)
        job = jobs.launch(RESTORE, view(), work)
        await eventually(lambda: work.held_while_running, timeout_s=WAIT_S)
        tasks.cancel_scope.cancel()

    assert (job.view.state, job.view.error) == ("cancelled", "the master stopped")
    assert work.concluded == [JobEnd("cancelled", "the master stopped")]
    assert jobs.maintenance.document.empty
    assert not (tmp_path / "maintenance.json").exists()
    with pytest.raises(MirbadOrchestrationError, match="not running"):
        jobs.launch(RESTORE, view("later"), Work(jobs.maintenance))

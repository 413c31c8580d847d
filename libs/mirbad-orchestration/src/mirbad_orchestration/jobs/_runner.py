"""The one job runner: one job at a time per node, whatever its kind, the node in maintenance meanwhile.

A kind (:class:`JobKind`: benchmarks, tuning runs, later restores and moves) names its jobs and gives
each started job its work (:class:`JobWork`); :class:`NodeJobs` does the rest the same way for all:
refuses a second job on a busy node (any kind), holds the node in maintenance (``/v1`` refuses its
models with the job's estimate as Retry-After) while the work runs, reports progress through the job's
own view (:meth:`RunningJob.report`), cancels on request and, whatever happens (success, failure,
cancel, the master stopping), releases the node before the job ends, so a waiter never sees an ended
job whose node is still held. Each kind keeps its last job per node for its listing.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, Self, TypeVar, cast

import anyio
from anyio.abc import TaskStatus

from mirbad_orchestration.exceptions import JobConflictError, NoJobRunningError
from mirbad_protocol.benchmarks import JobState

from ._host import JobHost
from ._maintenance import MaintenanceState, NodeMaintenance
from ._tasks import JobTasks

__all__ = ["JobEnd", "JobKind", "JobView", "JobWork", "NodeJobs", "RunningJob"]

_logger = logging.getLogger(__name__)
_LEAVE_TIMEOUT_S = 10.0  # releasing the node: one small file write


class JobView(Protocol):
    """The progress every kind's wire view carries (its other fields are the kind's own)."""

    @property
    def id(self) -> str:
        """The job's id."""

    @property
    def model_id(self) -> str:
        """The model it works on."""

    @property
    def node_id(self) -> str:
        """The node it holds."""

    @property
    def state(self) -> JobState:
        """Running, or how it ended."""

    @property
    def eta_s(self) -> float | None:
        """The seconds it expects to still need."""

    @property
    def finished_at(self) -> datetime | None:
        """When it ended."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied (the view is frozen)."""


ViewT = TypeVar("ViewT", bound=JobView)


@dataclass(frozen=True)
class JobKind(Generic[ViewT]):
    """A kind of job.

    Attributes:
        name: its name in the log (``benchmark``, ``tuning``).
        label: one job in words, for the maintenance notice (``a benchmark``: "a benchmark of 'm' is
            running on node 'n'").
        noun: one job in refusals (``benchmark job``).
        conclude_timeout_s: the bound of :meth:`JobWork.conclude` (storing what a stopped job did).
    """

    name: str
    label: str
    noun: str
    conclude_timeout_s: float = 30.0


@dataclass(frozen=True)
class JobEnd:
    """How a job ended: its state and, unless it succeeded, why."""

    state: JobState
    error: str | None = None


@dataclass
class RunningJob(Generic[ViewT]):
    """A started job: its view (its progress) and what cancels it."""

    kind: JobKind[ViewT]
    view: ViewT
    maintenance: MaintenanceState
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    cancelled_by_user: bool = False
    lost: str | None = None

    def update(self, **changes: object) -> None:
        """Change the view (nothing else sees it)."""
        self.view = self.view.model_copy(update=changes)

    async def report(self, **changes: object) -> None:
        """Change the view; a new ``eta_s`` also becomes the node's Retry-After."""
        self.update(**changes)
        if "eta_s" in changes:
            await self.maintenance.update_node(self.view.node_id, _whole(self.view.eta_s))

    def fail(self, reason: str) -> None:
        """End the work now as failed with ``reason`` (its model was lost, say)."""
        self.lost = reason
        self.scope.cancel()


class JobWork(ABC, Generic[ViewT]):
    """What one job of a kind does; the runner calls it with the node held (see the module)."""

    @abstractmethod
    async def run(self, job: RunningJob[ViewT]) -> str | None:
        """Do the work; returns the stored result's name when the work stores it itself."""

    async def failure(self, job: RunningJob[ViewT], exc: Exception) -> str:
        """Why the job failed with ``exc`` (a kind may know a better reason: its model went away)."""
        return str(exc) or type(exc).__name__

    async def conclude(self, job: RunningJob[ViewT], end: JobEnd) -> str | None:
        """After the node is released, however the job ended: store what it did; returns the file's name.

        Runs shielded and bounded by the kind's ``conclude_timeout_s``.
        """
        return None


class NodeJobs:
    """Runs every kind's jobs (see the module); start :meth:`run` in the app's task group first.

    Args:
        host: the master's side (a node's models, for the maintenance notice).
        maintenance: the maintenance state the router and the health monitor read.
        clock: the wall clock (aware), for the jobs' end times.
    """

    def __init__(
        self,
        host: JobHost,
        maintenance: MaintenanceState,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._host = host
        self._maintenance = maintenance
        self._clock = clock or (lambda: datetime.now(UTC))
        self._jobs: dict[tuple[str, str], RunningJob[Any]] = {}  # by (kind, node): running, else the last
        self._tasks = JobTasks("the job runner is not running (NodeJobs.run)")

    @property
    def maintenance(self) -> MaintenanceState:
        """The maintenance state the jobs hold their nodes through."""
        return self._maintenance

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the jobs' task group until cancelled (leaving cancels every running job)."""
        await self._tasks.run(task_status=task_status)

    def running_on(self, node_id: str) -> RunningJob[Any] | None:
        """The job (of any kind) running on ``node_id``, if any."""
        return next(
            (job for (_, node), job in self._jobs.items() if node == node_id and job.view.state == "running"),
            None,
        )

    def check_free(self, node_id: str) -> None:
        """Refuse a job on a node that runs one (of any kind).

        Raises:
            JobConflictError: naming the running job, its model and the node.
            MirbadOrchestrationError: the runner is not running.
        """
        self._tasks.group()
        running = self.running_on(node_id)
        if running is not None:
            raise JobConflictError(running.view.id, running.view.model_id, node_id)

    def launch(self, kind: JobKind[ViewT], view: ViewT, work: JobWork[ViewT]) -> RunningJob[ViewT]:
        """Start ``work`` as a job of ``kind`` on ``view.node_id``, checked free with no await between.

        Raises:
            JobConflictError: the node runs a job already.
        """
        self.check_free(view.node_id)
        job = RunningJob(kind, view, self._maintenance)
        self._jobs[(kind.name, view.node_id)] = job
        self._tasks.group().start_soon(self._run, job, work)
        return job

    def jobs(self, kind: JobKind[ViewT]) -> list[RunningJob[ViewT]]:
        """Every node's running job of ``kind``, else its last one, by node."""
        mine = sorted(key for key in self._jobs if key[0] == kind.name)
        return [cast(RunningJob[ViewT], self._jobs[key]) for key in mine]

    def find(self, kind: JobKind[ViewT], job_id: str) -> RunningJob[ViewT] | None:
        """The job ``job_id`` of ``kind`` while it runs or is the last of its node."""
        return next((job for job in self.jobs(kind) if job.view.id == job_id), None)

    async def wait(self, kind: JobKind[ViewT], job_id: str, *, timeout_s: float) -> ViewT:
        """Wait (bounded) for ``job_id`` to end; returns how it ended.

        Raises:
            NoJobRunningError: no such job.
            TimeoutError: it did not end within ``timeout_s``.
        """
        job = self.find(kind, job_id)
        if job is None:
            raise NoJobRunningError(f"no {kind.noun} {job_id!r}")
        with anyio.fail_after(timeout_s):
            await job.done.wait()
        return job.view

    async def cancel(self, kind: JobKind[ViewT], node_id: str | None, *, timeout_s: float) -> list[ViewT]:
        """Cancel the running job of ``kind`` on ``node_id`` (every one without); waits until they ended.

        Raises:
            NoJobRunningError: none runs there.
        """
        running = [
            job
            for job in self.jobs(kind)
            if job.view.state == "running" and (node_id is None or job.view.node_id == node_id)
        ]
        if not running:
            where = f" on node {node_id!r}" if node_id is not None else ""
            raise NoJobRunningError(f"no {kind.noun} is running{where}")
        for job in running:
            job.cancelled_by_user = True
            job.scope.cancel()
        with anyio.fail_after(timeout_s):
            for job in running:
                await job.done.wait()
        return [job.view for job in running]

    async def _run(self, job: RunningJob[ViewT], work: JobWork[ViewT]) -> None:
        # Set until the work ends one way or another: a cancel from outside is the master stopping.
        end = JobEnd("cancelled", "the master stopped")
        stored: str | None = None
        try:
            try:
                with job.scope:
                    stored = await self._hold(job, work)
            except Exception as exc:
                end = JobEnd("failed", job.lost or await work.failure(job, exc))
            else:
                end = self._end_of(job)
        finally:
            # The job ends (and its waiters wake) only after its node left maintenance.
            with anyio.CancelScope(shield=True), anyio.move_on_after(job.kind.conclude_timeout_s):
                stored = await work.conclude(job, end) or stored
            self._finish(job, end, stored)

    @staticmethod
    def _end_of(job: RunningJob[Any]) -> JobEnd:
        if job.lost is not None:
            return JobEnd("failed", job.lost)
        if job.scope.cancelled_caught or job.cancelled_by_user:
            return JobEnd("cancelled", "cancelled")
        return JobEnd("succeeded")

    async def _hold(self, job: RunningJob[ViewT], work: JobWork[ViewT]) -> str | None:
        view = job.view
        models = await self._host.node_models(view.node_id)
        held = NodeMaintenance(
            job_id=view.id,
            message=f"{job.kind.label} of {view.model_id!r} is running on node {view.node_id!r}",
            retry_after_s=_whole(view.eta_s),
            model_ids=[model.model_id for model in models],
            served_names=[model.served_name for model in models],
        )
        await self._maintenance.enter_node(view.node_id, held)
        try:
            return await work.run(job)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_LEAVE_TIMEOUT_S):
                await self._maintenance.leave_node(view.node_id)

    def _finish(self, job: RunningJob[Any], end: JobEnd, stored: str | None) -> None:
        if job.view.state != "running":
            return
        job.update(
            state=end.state,
            error=end.error,
            result=stored,
            finished_at=job.view.finished_at or self._clock(),
            eta_s=0.0,
        )
        job.done.set()
        suffix = f": {end.error}" if end.error else ""
        view = job.view
        _logger.info("%s job %s of %s ended %s%s", job.kind.name, view.id, view.model_id, end.state, suffix)


def _whole(seconds: float | None) -> int:
    return max(1, round(seconds or 1))

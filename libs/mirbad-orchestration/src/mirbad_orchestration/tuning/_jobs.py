"""Tuning jobs: one at a time per node (benchmarks included), the node in maintenance while it runs.

:meth:`TuningJobs.start` refuses what cannot be tuned before anything starts: an unknown model, a
reranker (422; an embedding model tunes its own dimensions on the embeddings suite), unknown steps
(422 naming them), a model that is not Ready (409: the baseline needs it running) and a node that
runs a job already (409). The run itself
holds the node in maintenance, builds the model's candidate runner, runs the engine and stores the run as
``{data}/tuning/{modelId}/{stamp}.json``; whatever happens the node leaves maintenance and the
runner restores the saved settings. Cancelling always propagates.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import anyio
from anyio.abc import TaskStatus

from mirbad_orchestration.benchmarks import (
    BenchmarkResults,
    WorkloadPreset,
    is_pooling,
    reranker_reason,
    workload_preset,
)
from mirbad_orchestration.exceptions import (
    JobConflictError,
    MirbadOrchestrationError,
    ModelHeldByJobError,
    ModelNotReadyError,
    NoJobRunningError,
    PresetNotForModelError,
)
from mirbad_orchestration.fleet import ModelRuntime
from mirbad_orchestration.jobs import JobHost, JobTarget, JobTasks, MaintenanceState, NodeMaintenance
from mirbad_protocol import (
    JobState,
    MirbadError,
    ModelDefinition,
    ModelState,
    ModelStatus,
    TuningJobView,
    TuningRequest,
    TuningRun,
)

from ._dimensions import ModelShape, TuningPlan, kv_auto_fits, plan_for
from ._engine import TuningEngine
from ._eta import EtaBasis, EtaProjection, eta_basis
from ._instances import tuning_id
from ._node_facts import NodeFacts, NodeFactsReader
from ._outcome import EngineOutcome
from ._preset_search import GateInputs, preset_plan
from ._results import TuningResults
from ._runner import CandidateRunner
from ._scoring import PresetScorer

__all__ = [
    "RunnerFactory",
    "TuningJobs",
    "planned_candidates",
    "planned_seconds",
]

RunnerFactory = Callable[[JobTarget, ModelDefinition], Awaitable[CandidateRunner]]
"""Builds the candidate runner of one run (the model's node, its saved definition)."""


async def _no_facts(target: JobTarget, saved: ModelDefinition, *, gates: bool) -> NodeFacts:
    return NodeFacts()


_logger = logging.getLogger(__name__)
_PER_CANDIDATE_S = 60.0  # the first estimate of a candidate (start + suite), before any was measured
_CONFIRMED = 3  # the confirmation stage re-measures at most the best two and the baseline


def planned_candidates(plan: TuningPlan) -> int:
    """The candidates a run of ``plan`` counts: the baseline, the plan's, the confirmation stage's three."""
    return plan.candidates + 1 + _CONFIRMED


def planned_seconds(plan: TuningPlan) -> float:
    """The first estimate of a run of ``plan``, before any candidate of the model was measured."""
    return EtaProjection(EtaBasis(), plan.candidates).planned()


def _gates_from_tags(definition: ModelDefinition) -> GateInputs:
    """Without the node's files: the registry's tags (``hybrid``, ``moe``) are what is known."""
    return GateInputs.from_tags(definition)


@dataclass
class _Job:
    view: TuningJobView
    request: TuningRequest = field(default_factory=TuningRequest)
    projection: EtaProjection | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    cancelled_by_user: bool = False

    def update(self, **changes: object) -> None:
        self.view = self.view.model_copy(update=changes)


class TuningJobs:
    """Runs tuning jobs (see the module); start :meth:`run` in the app's task group first.

    Args:
        host: the master's side (targets, node models).
        definition: reads a model's saved definition.
        results: where runs are stored.
        maintenance: the maintenance state the router and the health monitor read.
        runners: builds each run's candidate runner.
        busy: another job (a benchmark) running on a node, as (job id, model id), else None.
        repetitions: the suite's repetitions per candidate in the search.
        confirm_repetitions: those of the confirmation stage.
        cpu_count: the CPU cores assumed for a node that does not report its own.
        node_cores: a node's reported CPU cores (llama-server's thread counts), None when unknown.
        node_facts: reads what the model's node says of its files, once per run (and per preview):
            the checkpoint's shape for the KV gate and, for a preset run of a vLLM model, the preset
            gates' inputs (its ``config.json``, the drafter's, the weights' size; see
            :class:`~mirbad_orchestration.tuning.FleetNodeFacts`). Nothing by default: the KV
            dimension is then skipped with the reason, and ``gates`` answers for the preset gates.
        clock: the wall clock (aware).
        gates: what the preset search's gates know of a model before the first start (its
            ``config.json``, the drafter's, the image's MTP architectures, the KV gate's verdict);
            by default only the registry's tags (``hybrid``, ``moe``) and a saved mamba cache mode
            are known, so the other gates keep to what is proven without them.
        benchmarks: the stored benchmarks (the ETA's fallback: the last benchmark with the preset).
    """

    def __init__(
        self,
        host: JobHost,
        definition: Callable[[str], Awaitable[ModelDefinition]],
        results: TuningResults,
        maintenance: MaintenanceState,
        runners: RunnerFactory,
        *,
        busy: Callable[[str], tuple[str, str] | None] = lambda node_id: None,
        repetitions: int = 3,
        confirm_repetitions: int = 5,
        cpu_count: int = 2,
        node_cores: Callable[[str], int | None] = lambda node_id: None,
        node_facts: NodeFactsReader = _no_facts,
        clock: Callable[[], datetime] | None = None,
        gates: Callable[[ModelDefinition], GateInputs] = _gates_from_tags,
        benchmarks: BenchmarkResults | None = None,
    ) -> None:
        self._gates = gates
        self._read_facts = node_facts
        self._benchmarks = benchmarks
        self._host = host
        self._definition = definition
        self._results = results
        self._maintenance = maintenance
        self._runners = runners
        self._busy = busy
        self._repetitions = repetitions
        self._confirm_repetitions = confirm_repetitions
        self._cpu_count = cpu_count
        self._node_cores = node_cores
        self._clock = clock or (lambda: datetime.now(UTC))
        self._jobs: dict[str, _Job] = {}
        self._tasks = JobTasks("the tuning jobs are not running (TuningJobs.run)")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the jobs' task group until cancelled (leaving cancels every running job)."""
        await self._tasks.run(task_status=task_status)

    async def recover(
        self, runtime: ModelRuntime, models: list[ModelDefinition], statuses: list[ModelStatus]
    ) -> list[str]:
        """Remove tuning instances a previous master left running and bring their models back.

        Called at boot, before any run, with the instances the nodes reported (``statuses``): every
        instance under a registered model's tuning id is stopped, and the model is started again
        with its saved settings when nothing of it runs. Returns what was done, for the log.
        """
        by_tuning_id = {tuning_id(model.id): model for model in models}
        done = []
        for status in statuses:
            model = by_tuning_id.get(status.id)
            if model is None or status.state is ModelState.STOPPED:
                continue
            await runtime.stop(status.id)
            done.append(f"removed the leftover tuning instance {status.id!r}")
            if (await runtime.status(model.id)).state is ModelState.STOPPED:
                await runtime.start(model)
                done.append(f"started {model.id!r} again with its saved settings")
        return done

    def plan(
        self,
        definition: ModelDefinition,
        request: TuningRequest,
        *,
        node_id: str | None = None,
        shape: ModelShape | None = None,
        pooling: bool | None = None,
        gates: GateInputs | None = None,
    ) -> TuningPlan:
        """The plan a run of ``request`` on ``definition`` would follow (the portal previews it).

        A request with a preset follows the workload-preset search (a vLLM model; llama-server keeps
        its own dimensions), else the classic goal's dimensions. The thread counts come from the cores
        ``node_id`` (else the definition's placement) reports; ``shape`` decides the KV gate; ``pooling``
        (else the definition's flags and tags) picks the embedding model's dimensions; ``gates``
        (what the node said, else the constructor's ``gates``) feeds the preset search's gates.

        Raises:
            UnknownTuningStepError: ``request.steps`` names dimensions the runtime does not have.
            UnknownPresetError: no such preset.
        """
        pooled = is_pooling(definition.extra_args, definition.tags) if pooling is None else pooling
        if request.preset is not None:
            preset = workload_preset(request.preset)
            if definition.runtime == "vllm":
                gates = gates if gates is not None else self._gates(definition)
                if preset.pooling != gates.pooling:
                    gates = replace(gates, pooling=preset.pooling)
                if gates.kv_auto_fits is None and shape is not None:
                    gates = replace(gates, kv_auto_fits=kv_auto_fits(definition, shape))
                return preset_plan(definition, gates, search=request.search, steps=request.steps)
        node_id = node_id or (definition.placement.node_id if definition.placement else None)
        cores = (self._node_cores(node_id) if node_id else None) or self._cpu_count
        return plan_for(
            definition,
            search=request.search,
            steps=request.steps,
            cpu_count=cores,
            shape=shape,
            pooling=pooled,
        )

    async def preview(
        self, model_id: str, definition: ModelDefinition, request: TuningRequest, *, timeout_s: float = 5.0
    ) -> TuningPlan:
        """The plan of ``request`` with what the model's node says of its files (the portal's preview).

        As :meth:`plan`, with the checkpoint's shape and the preset gates' inputs read on the node as a
        run's start reads them; a node that does not answer within ``timeout_s`` (or at all) leaves
        them to the registry's tags, as :meth:`plan` alone does.
        """
        shape: ModelShape | None = None
        gates: GateInputs | None = None
        node_id: str | None = None
        with anyio.move_on_after(timeout_s):
            try:
                target = await self._host.target(model_id)
                node_id = target.node_id
                shape, gates = await self._node_facts(target, definition, request)
            except MirbadError:
                pass  # the preview falls back to the tags: the run's own start reads the node again
        return self.plan(definition, request, node_id=node_id, shape=shape, gates=gates)

    async def _node_facts(
        self, target: JobTarget, saved: ModelDefinition, request: TuningRequest
    ) -> tuple[ModelShape | None, GateInputs | None]:
        wanted = request.preset is not None and saved.runtime == "vllm"
        facts = await self._read_facts(target, saved, gates=wanted)
        return facts.shape, facts.gates

    async def estimate(self, model_id: str, plan: TuningPlan, preset: str | None) -> EtaProjection:
        """The ETA of a run of ``plan`` on ``model_id`` from its recent runs (see :mod:`._eta`)."""
        runs = (await self._results.list(model_id)).runs
        return EtaProjection(
            eta_basis(runs, preset, last_benchmark_s=await self._last_benchmark_s(model_id, preset)),
            plan.candidates,
            repetitions=self._repetitions,
            confirm_repetitions=self._confirm_repetitions,
        )

    async def _last_benchmark_s(self, model_id: str, preset: str | None) -> float | None:
        """One repetition of the newest stored benchmark with ``preset`` (None: there is none)."""
        if self._benchmarks is None:
            return None
        for result in (await self._benchmarks.list(model_id)).results:
            if result.preset == preset and result.finished_at is not None:
                seconds = (result.finished_at - result.started_at).total_seconds()
                return seconds / max(1, result.repetitions or 1) if seconds > 0 else None
        return None

    def running_on(self, node_id: str) -> TuningJobView | None:
        """The tuning job running on ``node_id``, if any."""
        job = self._jobs.get(node_id)
        return job.view if job is not None and job.view.state == "running" else None

    def check_not_held(self, model_id: str) -> None:
        """Refuse a change to ``model_id`` while a tuning run holds it (stopped now, restarted at its end).

        Raises:
            ModelHeldByJobError: naming the run, its model and its node (HTTP 409 ``job_conflict``).
        """
        for job in self._jobs.values():
            if job.view.state == "running" and job.view.model_id == model_id:
                raise ModelHeldByJobError(job.view.id, model_id, job.view.node_id)

    async def start(self, model_id: str, request: TuningRequest) -> TuningJobView:
        """Start tuning ``model_id`` (see the module for the refusals)."""
        target = await self._host.target(model_id)
        saved = await self._definition(model_id)
        reranker = reranker_reason(target.settings, target.tags)
        if reranker is not None:
            raise PresetNotForModelError(model_id, f"{reranker}; rerankers are not tuned")
        pooling = is_pooling(target.settings, target.tags)
        preset = self._preset_for(model_id, request, pooling=pooling)
        shape, gates = await self._node_facts(target, saved, request)
        plan = self.plan(saved, request, node_id=target.node_id, shape=shape, pooling=pooling, gates=gates)
        if not target.ready:
            raise ModelNotReadyError(model_id, target.state.value)
        tasks = self._tasks.group()
        self._check_free(target.node_id)
        projection = await self.estimate(model_id, plan, request.preset)
        self._check_free(target.node_id)  # checked again: the estimate read the results
        view = TuningJobView(
            id=secrets.token_hex(6),
            model_id=model_id,
            node_id=target.node_id,
            goal=request.goal,
            steps=plan.steps,
            total=projection.total,
            eta_s=projection.planned(),
            preset=None if preset is None else preset.name,
            started_at=self._clock(),
        )
        job = _Job(view, request, projection)
        self._jobs[target.node_id] = job  # no await since the last check: two starts cannot both pass
        tasks.start_soon(self._run_job, job, target, saved, plan)
        return job.view

    @staticmethod
    def _preset_for(model_id: str, request: TuningRequest, *, pooling: bool) -> WorkloadPreset | None:
        """The request's preset, refused when it is for the other kind of model."""
        if request.preset is None:
            return None
        preset = workload_preset(request.preset)
        if preset.pooling != pooling:
            kind = "an embedding" if preset.pooling else "a generation"
            raise PresetNotForModelError(model_id, f"preset {preset.name!r} is for {kind} model")
        return preset

    def _check_free(self, node_id: str) -> None:
        running = self.running_on(node_id)
        if running is not None:
            raise JobConflictError(running.id, running.model_id, node_id)
        other = self._busy(node_id)
        if other is not None:
            raise JobConflictError(*other, node_id)

    def jobs(self) -> list[TuningJobView]:
        """Every node's running tuning job, else its last one, by node."""
        return [self._jobs[node].view for node in sorted(self._jobs)]

    async def wait(self, job_id: str, *, timeout_s: float) -> TuningJobView:
        """Wait (bounded) for ``job_id`` to end (``NoJobRunningError``: no such job)."""
        job = next((job for job in self._jobs.values() if job.view.id == job_id), None)
        if job is None:
            raise NoJobRunningError(f"no tuning job {job_id!r}")
        with anyio.fail_after(timeout_s):
            await job.done.wait()
        return job.view

    async def cancel(self, node_id: str | None = None, *, timeout_s: float = 300.0) -> list[TuningJobView]:
        """Cancel the running tuning job(s); waits (bounded) until they ended and restored."""
        running = [
            job
            for node, job in self._jobs.items()
            if job.view.state == "running" and (node_id is None or node == node_id)
        ]
        if not running:
            raise NoJobRunningError("no tuning job is running" + (f" on node {node_id!r}" if node_id else ""))
        for job in running:
            job.cancelled_by_user = True
            job.scope.cancel()
        with anyio.fail_after(timeout_s):
            for job in running:
                await job.done.wait()
        return [job.view for job in running]

    async def _run_job(self, job: _Job, target: JobTarget, saved: ModelDefinition, plan: TuningPlan) -> None:
        outcome = EngineOutcome()
        state: JobState = "cancelled"
        error: str | None = "cancelled"
        try:
            with job.scope:
                await self._hold_and_tune(job, target, saved, plan, outcome)
                state, error = "succeeded", None
        except Exception as exc:
            state, error = "failed", str(exc) or type(exc).__name__
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                await self._finish(job, target, saved, outcome, state, error)

    async def _hold_and_tune(
        self, job: _Job, target: JobTarget, saved: ModelDefinition, plan: TuningPlan, outcome: EngineOutcome
    ) -> None:
        models = await self._host.node_models(target.node_id)
        held = NodeMaintenance(
            job_id=job.view.id,
            message=f"a tuning run of {target.model_id!r} is running on node {target.node_id!r}",
            retry_after_s=max(1, round(job.view.eta_s or 1)),
            model_ids=[model.model_id for model in models],
            served_names=[model.served_name for model in models],
        )
        await self._maintenance.enter_node(target.node_id, held)
        try:
            runner = await self._runners(target, saved)

            began = time.monotonic()

            async def progress(
                phase: str, description: str, done: int, *, goal: str = "", tradeoff: str = ""
            ) -> None:
                # Re-projected from the run's own pace once a candidate has finished.
                elapsed = time.monotonic() - began
                if job.projection is not None:
                    eta = job.projection.remaining(elapsed, done)
                else:
                    pace = elapsed / done if done else _PER_CANDIDATE_S
                    eta = max(0, job.view.total - done) * pace
                job.update(
                    phase=phase,
                    candidate=description,
                    candidate_goal=goal or None,
                    candidate_tradeoff=tradeoff or None,
                    done=done,
                    eta_s=eta,
                )
                await self._maintenance.update_node(target.node_id, max(1, round(eta)))

            preset = None if job.request.preset is None else workload_preset(job.request.preset)
            runner.select_preset(preset)
            engine = TuningEngine(
                runner,
                job.view.goal,
                scorer=None if preset is None else PresetScorer(preset),
                repetitions=self._repetitions,
                confirm_repetitions=self._confirm_repetitions,
                rng=random.Random(secrets.randbits(32)),  # noqa: S311 - orders measurements, no secret
                progress=progress,
            )
            await engine.run(saved, plan, outcome)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await self._maintenance.leave_node(target.node_id)

    async def _finish(
        self,
        job: _Job,
        target: JobTarget,
        saved: ModelDefinition,
        outcome: EngineOutcome,
        state: JobState,
        error: str | None,
    ) -> None:
        run = TuningRun(
            model_id=target.model_id,
            node_id=target.node_id,
            runtime=saved.runtime,
            goal=job.view.goal,
            steps=job.view.steps,
            repetitions=self._repetitions,
            confirm_repetitions=self._confirm_repetitions,
            started_at=job.view.started_at,
            finished_at=self._clock(),
            state=state,
            error=error,
            candidates=outcome.candidates,
            confirmation=outcome.confirmation,
            winner=outcome.winner,
            winner_is_baseline=outcome.winner_definition is None,
            best_definition=outcome.winner_definition,
            notes=outcome.notes,
            preset=job.request.preset,
            search=job.request.search if job.request.steps is None else None,
        )
        stored = None
        try:
            stored = await self._results.save(run)
        except (OSError, MirbadOrchestrationError) as exc:
            _logger.warning("cannot store the tuning run of %s: %s", target.model_id, exc)
        job.update(
            state=state, error=error, result=stored, finished_at=run.finished_at, eta_s=0.0, phase="done"
        )
        job.done.set()
        _logger.info("tuning job %s of %s ended %s", job.view.id, job.view.model_id, state)

"""Tuning jobs: the tuning kind of the node job runner, one job at a time per node (benchmarks included).

:meth:`TuningJobs.start` refuses what cannot be tuned before anything starts: an unknown model, a
reranker (422; an embedding model tunes its own dimensions on the embeddings suite), unknown steps
(422 naming them), a model that is not Ready (409: the baseline needs it running) and a node that
runs a job already (409). The runner (:class:`~mirbad_orchestration.jobs.NodeJobs`) holds the
node in maintenance while the run builds the model's candidate runner and runs the engine; the run is
stored as ``{data}/tuning/{modelId}/{stamp}.json``, stopped or not; whatever happens the node leaves
maintenance and the candidate runner restores the saved settings. Cancelling always propagates.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final

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
    MirbadOrchestrationError,
    ModelHeldByJobError,
    ModelNotReadyError,
    PresetNotForModelError,
)
from mirbad_orchestration.fleet import ModelRuntime
from mirbad_orchestration.jobs import (
    JobEnd,
    JobHost,
    JobKind,
    JobTarget,
    JobWork,
    MaintenanceState,
    NodeJobs,
    RunningJob,
)
from mirbad_protocol import MirbadError, ModelDefinition, ModelState, ModelStatus
from mirbad_protocol.tuning import TuningJobView, TuningRequest, TuningRun

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
    "TUNING",
    "RunnerFactory",
    "TuningJobs",
    "planned_candidates",
    "planned_seconds",
]

TUNING: Final = JobKind[TuningJobView](name="tuning", label="a tuning run", noun="tuning job")
"""The tuning kind of job."""

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
class _Job(JobWork[TuningJobView]):
    """One tuning run: what it tunes, its plan and what it found so far."""

    jobs: TuningJobs
    target: JobTarget
    saved: ModelDefinition
    plan: TuningPlan
    request: TuningRequest
    projection: EtaProjection
    outcome: EngineOutcome = field(default_factory=EngineOutcome)

    async def run(self, job: RunningJob[TuningJobView]) -> str | None:
        """Tune (the run is stored by :meth:`conclude`, however it ends)."""
        await self.jobs._tune(job, self)
        return None

    async def conclude(self, job: RunningJob[TuningJobView], end: JobEnd) -> str | None:
        """Store the run as far as it got; returns its file's name."""
        return await self.jobs._store(job, self, end)


class TuningJobs:
    """Runs tuning jobs (see the module); start :meth:`run` in the app's task group first.

    Args:
        host: the master's side (targets, node models).
        definition: reads a model's saved definition.
        results: where runs are stored.
        maintenance: the maintenance state the router and the health monitor read.
        runners: builds each run's candidate runner.
        runner: the node job runner shared with the other kinds (one job at a time per node, whatever
            its kind); by default one of its own over ``host`` and ``maintenance``.
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
        runner: NodeJobs | None = None,
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
        self._runners = runners
        self._repetitions = repetitions
        self._confirm_repetitions = confirm_repetitions
        self._cpu_count = cpu_count
        self._node_cores = node_cores
        self._clock = clock or (lambda: datetime.now(UTC))
        self._runner = runner or NodeJobs(host, maintenance, clock=self._clock)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the job runner until cancelled (leaving cancels every running job).

        Only for a runner of its own: a shared runner is run by whoever shares it.
        """
        await self._runner.run(task_status=task_status)

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
        return next(
            (
                job.view
                for job in self._runner.jobs(TUNING)
                if job.view.state == "running" and job.view.node_id == node_id
            ),
            None,
        )

    def check_not_held(self, model_id: str) -> None:
        """Refuse a change to ``model_id`` while a tuning run holds it (stopped now, restarted at its end).

        Raises:
            ModelHeldByJobError: naming the run, its model and its node (HTTP 409 ``job_conflict``).
        """
        for job in self._runner.jobs(TUNING):
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
        self._runner.check_free(target.node_id)
        projection = await self.estimate(model_id, plan, request.preset)
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
        work = _Job(self, target, saved, plan, request, projection)
        # Checked again (the estimate read the results) and started with no await between.
        return self._runner.launch(TUNING, view, work).view

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

    def jobs(self) -> list[TuningJobView]:
        """Every node's running tuning job, else its last one, by node."""
        return [job.view for job in self._runner.jobs(TUNING)]

    async def wait(self, job_id: str, *, timeout_s: float) -> TuningJobView:
        """Wait (bounded) for ``job_id`` to end (``NoJobRunningError``: no such job)."""
        return await self._runner.wait(TUNING, job_id, timeout_s=timeout_s)

    async def cancel(self, node_id: str | None = None, *, timeout_s: float = 300.0) -> list[TuningJobView]:
        """Cancel the running tuning job(s); waits (bounded) until they ended and restored."""
        return await self._runner.cancel(TUNING, node_id, timeout_s=timeout_s)

    async def _tune(self, job: RunningJob[TuningJobView], work: _Job) -> None:
        runner = await self._runners(work.target, work.saved)
        began = time.monotonic()

        async def progress(
            phase: str, description: str, done: int, *, goal: str = "", tradeoff: str = ""
        ) -> None:
            # Re-projected from the run's own pace once a candidate has finished.
            eta = work.projection.remaining(time.monotonic() - began, done)
            await job.report(
                phase=phase,
                candidate=description,
                candidate_goal=goal or None,
                candidate_tradeoff=tradeoff or None,
                done=done,
                eta_s=eta,
            )

        preset = None if work.request.preset is None else workload_preset(work.request.preset)
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
        await engine.run(work.saved, work.plan, work.outcome)

    async def _store(self, job: RunningJob[TuningJobView], work: _Job, end: JobEnd) -> str | None:
        outcome, request = work.outcome, work.request
        run = TuningRun(
            model_id=work.target.model_id,
            node_id=work.target.node_id,
            runtime=work.saved.runtime,
            goal=job.view.goal,
            steps=job.view.steps,
            repetitions=self._repetitions,
            confirm_repetitions=self._confirm_repetitions,
            started_at=job.view.started_at,
            finished_at=self._clock(),
            state=end.state,
            error=end.error,
            candidates=outcome.candidates,
            confirmation=outcome.confirmation,
            winner=outcome.winner,
            winner_is_baseline=outcome.winner_definition is None,
            best_definition=outcome.winner_definition,
            notes=outcome.notes,
            preset=request.preset,
            search=request.search if request.steps is None else None,
        )
        job.update(finished_at=run.finished_at, phase="done")
        try:
            return await self._results.save(run)
        except (OSError, MirbadOrchestrationError) as exc:
            _logger.warning("cannot store the tuning run of %s: %s", work.target.model_id, exc)
            return None

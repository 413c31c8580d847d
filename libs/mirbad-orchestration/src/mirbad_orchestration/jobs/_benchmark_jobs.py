"""Benchmark jobs: the benchmark kind of the node job runner (:class:`~mirbad_orchestration.jobs.NodeJobs`).

A job measures a Ready model with its current settings (no restart). It holds the model's node in
maintenance (``/v1`` refuses the node's models with the job's estimate as Retry-After; other nodes keep
serving), drains (every Ready model of the node reports 0 running and 0 waiting on a sample taken after
the job started, within a bound, else the result is noisy "in-flight requests at start"), samples the
node's GPUs for 5 s (busy above 10 % is noisy, see :class:`GpuSampler`), runs the suite and stores the
result. Whatever happens (success, failure, cancel, the model deleted or crashing mid-job) the node
leaves maintenance; a lost model fails the job with the reason. Cancelling always propagates: the job's
requests are cancelled with it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Final

import anyio
from anyio.abc import TaskStatus

from mirbad_orchestration.benchmarks import (
    WORKLOAD_PRESETS,
    BenchmarkResults,
    CacheCounter,
    ClassicSuite,
    PresetSuite,
    Progress,
    WorkloadPreset,
    check_guards,
    embedding_input_limit,
    is_pooling,
    preset_guards,
    preset_levels,
    reranker_reason,
)
from mirbad_orchestration.exceptions import (
    MirbadOrchestrationError,
    ModelNotReadyError,
    PresetNotForModelError,
    UnknownModelError,
    UnknownPresetError,
)
from mirbad_protocol import MirbadError, ModelState
from mirbad_protocol.benchmarks import (
    BenchmarkJobView,
    BenchmarkResult,
    BenchmarkSizes,
    ConcurrencyLevelResult,
    PresetSizes,
    SloGuards,
)
from mirbad_protocol.support import single_errors

from ._gpu_check import DEFAULT_GPU_SAMPLE_INTERVAL_S, DEFAULT_GPU_SAMPLE_S, GpuSampler
from ._host import JobHost, JobTarget
from ._maintenance import MaintenanceState
from ._runner import JobKind, JobWork, NodeJobs, RunningJob

__all__ = [
    "BENCHMARK",
    "DEFAULT_COUNTER_WAIT_S",
    "DEFAULT_DRAIN_TIMEOUT_S",
    "PRESETS",
    "BenchmarkJobs",
    "estimate_seconds",
    "paced_eta",
]

PRESETS: Final = ("classic", *WORKLOAD_PRESETS)
"""The benchmark presets there are: ``classic`` (also the default) and the workload presets."""
DEFAULT_DRAIN_TIMEOUT_S: Final = 120.0
"""How long a job waits for its node's models to drain before it measures anyway (noisy)."""
DEFAULT_COUNTER_WAIT_S: Final = 30.0
"""How long a read of a model's prefix-cache counter waits for a telemetry sample taken after it."""

_logger = logging.getLogger(__name__)
# A pessimistic decode speed for the first estimate, before the job has measured anything.
_ASSUMED_TOKENS_PER_S: Final = 20.0
_EXTRA_PARTS_S: Final = 30.0  # prefill, tool call and questions
# The phases whose runs the ETA counts (the classic levels, the preset's short chat).
_TIMED_RUNS: Final = ("concurrency", "short-chat", "embeddings")


def estimate_seconds(sizes: BenchmarkSizes) -> float:
    """The first estimate of a classic run: every timed run at a slow decode speed, plus the extras."""
    per_run = sizes.max_tokens / _ASSUMED_TOKENS_PER_S
    return (len(sizes.levels) * sizes.runs + 1) * per_run + _EXTRA_PARTS_S


_EXTRA_RUNS: Final = {
    "prefill": 3,
    "tool-call": 2,
    "tool-calls": 3,
    "cold-prompts": 3,
    "shared-prefix": 2,
    "questions": 1,
}
"""The parts after the timed runs, each as so many runs' time."""


def paced_eta(
    phase: str, *, total_runs: int, finished_runs: int, per_run_s: float | None, first_estimate: float
) -> float:
    """The seconds a job still needs at its measured pace: the runs left and the parts after them.

    Args:
        phase: the suite's phase now.
        total_runs: the timed runs of the whole job.
        finished_runs: the timed runs done (all of them once past the timed phases).
        per_run_s: the measured seconds of one run: the runs so far, else the warm-up's one request of a
            run's size; None before anything was measured.
        first_estimate: the job's estimate from its sizes, used until something was measured (it
            assumes a slow decode, so it errs long: 668 s shown for a 23 s run on a small model).
    """
    if per_run_s is None:
        return first_estimate
    return max(0.0, (total_runs - finished_runs + _EXTRA_RUNS.get(phase, 3)) * per_run_s)


def _preset_runs(preset: WorkloadPreset, sizes: PresetSizes, max_num_seqs: int | None) -> int:
    levels, _, _ = preset_levels(sizes, max_num_seqs)
    if preset.pooling:
        embedding = sizes.model_copy(update={"levels": sizes.embedding_levels})
        return max(1, len(preset_levels(embedding, max_num_seqs)[0]) * sizes.repetitions)
    short = len(sizes.short_output_tokens) * len(levels) if "short-chat" in preset.workloads else 0
    return max(1, short * sizes.repetitions)


def _preset_estimate(preset: WorkloadPreset, sizes: PresetSizes, max_num_seqs: int | None) -> float:
    """The first estimate of a preset run, like :func:`estimate_seconds` (the mean output length)."""
    tokens = sum(sizes.short_output_tokens) / max(1, len(sizes.short_output_tokens))
    per_run = tokens / _ASSUMED_TOKENS_PER_S
    return (_preset_runs(preset, sizes, max_num_seqs) + 1) * per_run + 2 * _EXTRA_PARTS_S


BENCHMARK: Final = JobKind[BenchmarkJobView](name="benchmark", label="a benchmark", noun="benchmark job")
"""The benchmark kind of job."""


@dataclass
class _Job(JobWork[BenchmarkJobView]):
    """One benchmark: its plan, its measured pace, and the runner's job once it runs."""

    jobs: BenchmarkJobs
    target: JobTarget
    sizes: BenchmarkSizes
    preset: WorkloadPreset | None = None
    guards: SloGuards | None = None
    total_runs: int = 0
    runs_started: int = 0
    first_run_at: float | None = None
    first_estimate: float = 0.0
    warm_up_at: float | None = None
    warm_up_s: float | None = None
    running: RunningJob[BenchmarkJobView] | None = None

    @property
    def view(self) -> BenchmarkJobView:
        return self._running().view

    def update(self, **changes: object) -> None:
        self._running().update(**changes)

    async def report(self, **changes: object) -> None:
        await self._running().report(**changes)

    def fail(self, reason: str) -> None:
        self._running().fail(reason)

    async def run(self, job: RunningJob[BenchmarkJobView]) -> str | None:
        """Measure and store the result; returns its file's name."""
        self.running = job
        return await self.jobs._measure_and_save(self)

    async def failure(self, job: RunningJob[BenchmarkJobView], exc: Exception) -> str:
        """Its model's loss when that is why the suite failed, else the error."""
        return await self.jobs._loss_reason_of(self.target.model_id) or await super().failure(job, exc)

    def _running(self) -> RunningJob[BenchmarkJobView]:
        if self.running is None:
            raise MirbadOrchestrationError("the benchmark job has not started")
        return self.running


class BenchmarkJobs:
    """Runs benchmark jobs (see the module); start :meth:`run` in the app's task group first.

    Args:
        host: the master's side (targets, node models, telemetry, GPUs).
        results: where results are stored.
        maintenance: the maintenance state the router and the health monitor read.
        sizes: the classic suite's sizes (the spec's by default; tests pass small ones).
        preset_sizes: the workload presets' sizes (likewise).
        drain_timeout_s: the bound of the drain (the spec's 120 s by default).
        poll_s: how often the drain and the model watch look again.
        counter_wait_s: how long a read of the model's prefix-cache counter waits for a telemetry sample
            taken after it (30 s by default: the agent scrapes every 5 s, the master reads it every 10 s;
            then "cache metrics unavailable").
        gpu_sample_s: how long the GPU check samples the node's GPUs (the spec's 5 s by default).
        gpu_interval_s: the wait between two GPU readings.
        clock: the wall clock (aware), for the job's and the result's times.
        runner: the node job runner shared with the other kinds (one job at a time per node, whatever
            its kind); by default one of its own over ``host`` and ``maintenance``.
    """

    def __init__(
        self,
        host: JobHost,
        results: BenchmarkResults,
        maintenance: MaintenanceState,
        *,
        sizes: BenchmarkSizes | None = None,
        preset_sizes: PresetSizes | None = None,
        drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
        poll_s: float = 1.0,
        counter_wait_s: float = DEFAULT_COUNTER_WAIT_S,
        gpu_sample_s: float = DEFAULT_GPU_SAMPLE_S,
        gpu_interval_s: float = DEFAULT_GPU_SAMPLE_INTERVAL_S,
        clock: Callable[[], datetime] | None = None,
        runner: NodeJobs | None = None,
    ) -> None:
        self._host = host
        self._results = results
        self._maintenance = maintenance
        self._sizes = sizes or BenchmarkSizes()
        self._preset_sizes = preset_sizes or PresetSizes()
        self._drain_timeout_s = drain_timeout_s
        self._poll_s = poll_s
        self._counter_wait_s = counter_wait_s
        self._gpu_sample_s = gpu_sample_s
        self._gpu_interval_s = gpu_interval_s
        self._clock = clock or (lambda: datetime.now(UTC))
        self._runner = runner or NodeJobs(host, maintenance, clock=self._clock)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the job runner until cancelled (leaving cancels every running job).

        Only for a runner of its own: a shared runner is run by whoever shares it.
        """
        await self._runner.run(task_status=task_status)

    async def start(
        self, model_id: str, *, preset: str | None = None, guards: SloGuards | None = None
    ) -> BenchmarkJobView:
        """Start a benchmark of ``model_id`` with its current settings.

        Args:
            model_id: the model.
            preset: a workload preset, or ``classic`` / None for the classic suite.
            guards: overrides of the preset's guards (only the fields set count).

        Raises:
            UnknownPresetError: ``preset`` is not one of :data:`PRESETS`.
            UnknownModelError: no such model.
            PresetNotForModelError: a reranker, or a preset for the other kind of model.
            ModelNotReadyError: the model is not Ready.
            JobConflictError: a job runs on the model's node already.
        """
        if preset is not None and preset not in PRESETS:
            raise UnknownPresetError(preset, list(PRESETS))
        chosen = WORKLOAD_PRESETS.get(preset or "classic")
        target = await self._host.target(model_id)
        self._check_kind(target, chosen)
        if not target.ready:
            raise ModelNotReadyError(model_id, target.state.value)
        view, job = self._new_job(target, chosen, guards)
        # The runner checks the node is free and starts the job with no await between.
        return self._runner.launch(BENCHMARK, view, job).view

    def jobs(self) -> list[BenchmarkJobView]:
        """Every node's running job, else its last one, by node."""
        return [job.view for job in self._runner.jobs(BENCHMARK)]

    def job(self, job_id: str) -> BenchmarkJobView | None:
        """The job ``job_id`` while it is running or the last of its node."""
        job = self._runner.find(BENCHMARK, job_id)
        return None if job is None else job.view

    async def wait(self, job_id: str, *, timeout_s: float) -> BenchmarkJobView:
        """Wait (bounded) for ``job_id`` to end; returns how it ended.

        Raises:
            NoJobRunningError: no such job.
            TimeoutError: it did not end within ``timeout_s``.
        """
        return await self._runner.wait(BENCHMARK, job_id, timeout_s=timeout_s)

    async def cancel(self, node_id: str | None = None, *, timeout_s: float = 30.0) -> list[BenchmarkJobView]:
        """Cancel the running job of ``node_id`` (every running job without one); waits until they ended.

        Raises:
            NoJobRunningError: nothing runs there.
        """
        return await self._runner.cancel(BENCHMARK, node_id, timeout_s=timeout_s)

    @staticmethod
    def _check_kind(target: JobTarget, preset: WorkloadPreset | None) -> None:
        """Refuse a reranker, and a preset made for the other kind of model."""
        reranker = reranker_reason(target.settings, target.tags)
        if reranker is not None:
            raise PresetNotForModelError(target.model_id, reranker)
        pooling = is_pooling(target.settings, target.tags)
        if preset is not None and preset.pooling and not pooling:
            raise PresetNotForModelError(
                target.model_id, "the Embeddings preset measures pooling (embedding) models only"
            )
        if pooling and (preset is None or not preset.pooling):
            what = f"the {preset.label} preset" if preset else "the classic suite"
            raise PresetNotForModelError(
                target.model_id, f"it is an embedding model: {what} measures chat; use the embeddings preset"
            )

    def _new_job(
        self, target: JobTarget, preset: WorkloadPreset | None, guards: SloGuards | None
    ) -> tuple[BenchmarkJobView, _Job]:
        if preset is None:
            runs, eta = self._sizes.runs, estimate_seconds(self._sizes)
            total = len(self._sizes.levels) * self._sizes.runs
        else:
            runs = self._preset_sizes.repetitions
            eta = _preset_estimate(preset, self._preset_sizes, target.max_num_seqs)
            total = _preset_runs(preset, self._preset_sizes, target.max_num_seqs)
        view = BenchmarkJobView(
            id=secrets.token_hex(6),
            model_id=target.model_id,
            node_id=target.node_id,
            preset=preset.name if preset else None,
            started_at=self._clock(),
            runs=runs,
            eta_s=eta,
        )
        return view, _Job(
            self,
            target,
            self._sizes,
            preset=preset,
            guards=preset_guards(preset, guards) if preset else None,
            total_runs=total,
            first_estimate=eta,
        )

    async def _measure_and_save(self, job: _Job) -> str:
        target = job.target
        with single_errors():
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watch, job, target.model_id)
                result = await self._measure(job, target)
                tasks.cancel_scope.cancel()
        job.update(phase="saving")
        return await self._results.save(result)

    async def _measure(self, job: _Job, target: JobTarget) -> BenchmarkResult:
        assert target.endpoint is not None
        started_at = job.view.started_at
        noisy = await self._drain(job, target.node_id)
        gpu_noisy, gpu = await self._gpu_check(job, target.node_id, drained=not noisy)
        noisy = [*noisy, *gpu_noisy]
        progress = _JobProgress(partial(self._report_progress, job))
        if job.preset is not None:
            return await self._measure_preset(job, target, progress, noisy=noisy, gpu=gpu)
        suite = ClassicSuite(
            target.endpoint,
            job.sizes,
            max_model_len=target.max_model_len,
            progress=progress,
            noise=lambda: self._other_models_busy(target),
        )
        outcome = await suite.run()
        return BenchmarkResult(
            model_id=target.model_id,
            served_name=target.served_name,
            node_id=target.node_id,
            runtime=target.runtime,
            started_at=started_at,
            finished_at=self._clock(),
            config_hash=target.config_hash,
            restart_pending=target.restart_pending,
            settings=target.settings,
            sizes=job.sizes,
            gpu=gpu,
            noisy=noisy,
            levels=outcome.levels,
            prefill=outcome.prefill,
            tool_call=outcome.tool_call,
            questions=outcome.questions,
        )

    async def _measure_preset(
        self, job: _Job, target: JobTarget, progress: Progress, *, noisy: list[str], gpu: str
    ) -> BenchmarkResult:
        assert target.endpoint is not None
        assert job.preset is not None
        assert job.guards is not None
        suite = PresetSuite(
            target.endpoint,
            job.preset,
            self._preset_sizes,
            max_model_len=target.max_model_len,
            max_num_seqs=target.max_num_seqs,
            cache_counter=self._cache_counter(target.model_id),
            progress=progress,
            noise=lambda: self._other_models_busy(target),
            # Read from the arguments the instance runs with: its context and batch, as launched.
            input_limit=embedding_input_limit(target.runtime, target.settings, target.max_model_len),
        )
        outcome = await suite.run()
        # The portal plots the shortest output's levels the way it plots a classic run's.
        shortest = min(self._preset_sizes.short_output_tokens, default=0)
        levels = [
            ConcurrencyLevelResult(
                concurrency=level.concurrency,
                per_request_tokens_per_s=level.per_request_tokens_per_s,
                aggregate_tokens_per_s=level.aggregate_tokens_per_s,
                ttft_p50_s=level.ttft_p50_s,
                ttft_p95_s=level.ttft_p95_s,
                runs=level.runs,
            )
            for level in outcome.workloads.short_chat
            if level.output_tokens == shortest
            and level.per_request_tokens_per_s is not None
            and level.aggregate_tokens_per_s is not None
            and level.ttft_p50_s is not None
            and level.ttft_p95_s is not None
        ]
        return BenchmarkResult(
            schema_version=2,
            preset=job.preset.name,
            model_id=target.model_id,
            served_name=target.served_name,
            node_id=target.node_id,
            runtime=target.runtime,
            started_at=job.view.started_at,
            finished_at=self._clock(),
            config_hash=target.config_hash,
            restart_pending=target.restart_pending,
            settings=target.settings,
            gpu=gpu,
            noisy=noisy,
            levels=levels,
            questions=outcome.questions,
            repetitions=self._preset_sizes.repetitions,
            preset_sizes=self._preset_sizes,
            workloads=outcome.workloads,
            components=outcome.components,
            guards=job.guards,
            guard_violations=check_guards(job.guards, outcome.guard_inputs),
        )

    async def _drain(self, job: _Job, node_id: str) -> list[str]:
        job.update(phase="draining")
        since = self._clock()
        with anyio.move_on_after(self._drain_timeout_s):
            while True:
                busy = await self._busy_models(node_id, since)
                if not busy:
                    return []
                await anyio.sleep(self._poll_s)
        busy = await self._busy_models(node_id, since)
        return [f"in-flight requests at start ({', '.join(busy)})"] if busy else []

    async def _busy_models(self, node_id: str, since: datetime) -> list[str]:
        """The node's Ready models without a fresh sample of 0 running and 0 waiting."""
        busy = []
        for model in await self._host.node_models(node_id):
            if not model.ready:
                continue
            sample = self._host.latest_metrics(model.model_id)
            fresh = sample is not None and sample.at > since
            if not fresh or sample is None or sample.requests_running > 0 or sample.requests_waiting > 0:
                busy.append(model.model_id)
        return busy

    async def _gpu_check(self, job: _Job, node_id: str, *, drained: bool) -> tuple[list[str], str]:
        """Sample the node's GPUs; returns the noisy notes and the result's ``gpu``."""
        job.update(phase="gpu-check")
        sampler = GpuSampler(
            partial(self._host.gpus, node_id), window_s=self._gpu_sample_s, interval_s=self._gpu_interval_s
        )
        starting = await self._models_starting(node_id)
        checked = await sampler.check()
        if checked.verdict != "busy":
            return [], checked.verdict
        return checked.noisy(await self._own_work(node_id, drained=drained, starting=starting)), "busy"

    async def _own_work(self, node_id: str, *, drained: bool, starting: list[str]) -> str | None:
        """What of Mirbad's own may have loaded the node's GPUs in the window, else None.

        The drained models are idle, but a drain that gave up left requests in flight, and a model
        started by hand (maintenance keeps only ``/v1`` away) loads its weights and compiles on the GPU.
        """
        if not drained:
            return "the node's models still had requests in flight"
        starting = sorted({*starting, *await self._models_starting(node_id)})
        if not starting:
            return None
        names = ", ".join(repr(model_id) for model_id in starting)
        return f"model {names} was starting" if len(starting) == 1 else f"models {names} were starting"

    async def _models_starting(self, node_id: str) -> list[str]:
        """The node's models that are starting now (those whose state cannot be read are left out)."""
        moving = []
        for model in await self._host.node_models(node_id):
            if model.ready:
                continue
            try:
                state = (await self._host.target(model.model_id)).state
            except MirbadError:
                continue  # deleted meanwhile, or its node cannot say: nothing known to be starting
            if state is ModelState.STARTING:
                moving.append(model.model_id)
        return moving

    def _cache_counter(self, model_id: str) -> CacheCounter:
        """Reads the model's prefix-cache-hit counter from the first telemetry sample taken after the call.

        Only a sample scraped after the last timed request counts them all, so the read waits for a fresh
        one (the agent scrapes every 5 s, the master reads every 10 s). A server without the counter
        (llama-server, whose per-request ``cache_n`` the suite sums instead) answers None at once.
        """

        async def read() -> float | None:
            latest = self._host.latest_metrics(model_id)
            if latest is None or latest.prefix_cache_hits_total is None:
                return None
            since = self._clock()
            with anyio.move_on_after(self._counter_wait_s):
                while True:
                    sample = self._host.latest_metrics(model_id)
                    if sample is not None and sample.at > since:
                        return sample.prefix_cache_hits_total
                    await anyio.sleep(self._poll_s)
            return None

        return read

    async def _other_models_busy(self, target: JobTarget) -> list[str]:
        noisy = []
        for model in await self._host.node_models(target.node_id):
            if model.model_id == target.model_id or not model.ready:
                continue
            sample = self._host.latest_metrics(model.model_id)
            if sample is not None and sample.requests_running > 0:
                noisy.append(f"model {model.model_id!r} had running requests")
        return noisy

    async def _watch(self, job: _Job, model_id: str) -> None:
        """Fail the job as soon as its model is deleted, stops or crashes."""
        while True:
            await anyio.sleep(self._poll_s)
            reason = await self._loss_reason_of(model_id)
            if reason is not None:
                job.fail(reason)
                return

    async def _loss_reason_of(self, model_id: str) -> str | None:
        try:
            now = await self._host.target(model_id)
        except UnknownModelError:
            return f"model {model_id!r} was deleted during the benchmark"
        except MirbadError as exc:
            _logger.warning("cannot check model %s during its benchmark: %s", model_id, exc)
            return None
        if now.ready:
            return None
        detail = f": {now.error}" if now.error else ""
        return f"model {model_id!r} went {now.state.value} during the benchmark{detail}"

    async def _report_progress(self, job: _Job, phase: str, concurrency: int | None, run: int | None) -> None:
        now = time.monotonic()
        if phase == "warm-up":
            job.warm_up_at = now
        if phase in _TIMED_RUNS and run is not None:
            job.runs_started += 1
            if job.first_run_at is None:
                job.first_run_at = now
                # The warm-up is one request of a timed run's size: the first measured pace.
                if job.warm_up_at is not None:
                    job.warm_up_s = now - job.warm_up_at
        eta = self._eta(job, phase, now)
        await job.report(phase=phase, concurrency=concurrency, run=run, eta_s=eta)

    def _eta(self, job: _Job, phase: str, now: float) -> float:
        """Runs left at the pace of the runs so far (the warm-up's before the first ends), plus the rest."""
        total = job.total_runs
        finished = total if phase not in (*_TIMED_RUNS, "warm-up", "draining") else job.runs_started - 1
        per_run = job.warm_up_s
        if finished > 0 and job.first_run_at is not None:
            per_run = (now - job.first_run_at) / finished
        return paced_eta(
            phase,
            total_runs=total,
            finished_runs=max(0, finished),
            per_run_s=per_run,
            first_estimate=job.first_estimate,
        )


class _JobProgress(Progress):
    """Hands the suite's phases to the job (its view and the maintenance estimate)."""

    def __init__(self, report: Callable[[str, int | None, int | None], Awaitable[None]]) -> None:
        self._report = report

    async def phase(self, name: str, *, concurrency: int | None = None, run: int | None = None) -> None:
        """Update the job's progress and its node's Retry-After."""
        await self._report(name, concurrency, run)

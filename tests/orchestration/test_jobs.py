"""Benchmark jobs: one per node, maintenance held and always released, drain, cancel and lost models.

The model answers from a stand-in chat server on loopback (``_fake_chat``); the master's side is a
hand-written :class:`FakeHost`. Sizes are tiny: N = 1 and 2, one run, 4 tokens.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from tests._support.asgi_server import serve_asgi
from tests._support.polling import eventually
from tests.orchestration._fake_chat import FakeChatServer

from mirbad_orchestration import (
    JobConflictError,
    ModelNotReadyError,
    NoJobRunningError,
    UnknownModelError,
    UnknownPresetError,
)
from mirbad_orchestration.benchmarks import BenchmarkResults, ChatEndpoint
from mirbad_orchestration.jobs import (
    MAINTENANCE_FILE_NAME,
    BenchmarkJobs,
    JobHost,
    JobTarget,
    MaintenanceState,
    NodeMaintenance,
    NodeModel,
    estimate_seconds,
    paced_eta,
)
from mirbad_protocol import GpuMemory, ModelMetrics, ModelState
from mirbad_protocol.benchmarks import BenchmarkSizes, PresetSizes

pytestmark = pytest.mark.anyio

TINY = BenchmarkSizes(levels=[1, 2], runs=1, max_tokens=4, prefill_tokens=80, question_tokens=4)
"""The sizes of these tests (the product runs the spec's)."""
WAIT_S = 10.0


@dataclass
class FakeHost(JobHost):
    """Targets by model id, placements by node; telemetry is live and idle unless a model is busy."""

    targets: dict[str, JobTarget] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)
    node_gpus: dict[str, list[GpuMemory]] = field(default_factory=dict)
    gpu_reads: list[str] = field(default_factory=list)

    async def target(self, model_id: str) -> JobTarget:
        if model_id not in self.targets:
            raise UnknownModelError(model_id)
        return self.targets[model_id]

    async def node_models(self, node_id: str) -> list[NodeModel]:
        return [
            NodeModel(t.model_id, t.served_name, t.ready)
            for t in self.targets.values()
            if t.node_id == node_id
        ]

    def latest_metrics(self, model_id: str) -> ModelMetrics | None:
        running = 1.0 if model_id in self.busy else 0.0
        return ModelMetrics(
            model_id=model_id, at=datetime.now(UTC) + timedelta(seconds=1), requests_running=running
        )

    async def gpus(self, node_id: str) -> list[GpuMemory]:
        self.gpu_reads.append(node_id)
        return self.node_gpus.get(node_id, [])


@dataclass
class Bench:
    host: FakeHost
    jobs: BenchmarkJobs
    maintenance: MaintenanceState
    results: BenchmarkResults
    server: FakeChatServer
    data_dir: Path


@pytest.fixture
async def bench(tmp_path: Path) -> AsyncIterator[Bench]:
    server = FakeChatServer()
    async with serve_asgi(server.app) as base, httpx.AsyncClient(trust_env=False) as client:
        endpoint = ChatEndpoint(f"{base}/agent/v1/proxy/m/", client, served_name="Qwen", timeout_s=WAIT_S)
        host = FakeHost()
        for model_id, node_id in (("qwen", "gpu-1"), ("llama", "gpu-1"), ("other", "gpu-2")):
            served = "Qwen" if model_id == "qwen" else model_id.title()
            host.targets[model_id] = JobTarget(
                model_id, served, node_id, "llamacpp", ModelState.READY,
                endpoint=replace(endpoint, served_name=served), max_model_len=256, config_hash="abcd",
            )  # fmt: skip
        maintenance = MaintenanceState(tmp_path)
        results = BenchmarkResults(tmp_path)
        jobs = BenchmarkJobs(
            host, results, maintenance, sizes=TINY, drain_timeout_s=0.5, poll_s=0.02,
            gpu_sample_s=0.1, gpu_interval_s=0.05,
        )  # fmt: skip
        async with anyio.create_task_group() as tasks:
            await tasks.start(jobs.run)
            yield Bench(host, jobs, maintenance, results, server, tmp_path)
            tasks.cancel_scope.cancel()


async def hold_chats(bench: Bench) -> None:
    """Hold every streamed chat before its end (until the test sets the event)."""
    bench.server.hold = anyio.Event()


async def until_holding(bench: Bench) -> None:
    await eventually(lambda: bench.server.holding > 0, timeout_s=WAIT_S)


async def test_a_job_measures_and_stores_a_result_with_the_node_in_maintenance(bench: Bench) -> None:
    await hold_chats(bench)
    job = await bench.jobs.start("qwen")
    await until_holding(bench)
    during = bench.maintenance.notice_for("qwen")
    other_node = bench.maintenance.notice_for("Other")
    owned = (bench.maintenance.owns("qwen"), bench.maintenance.owns("llama"), bench.maintenance.owns("other"))
    flag = json.loads((bench.data_dir / MAINTENANCE_FILE_NAME).read_text())
    running = bench.jobs.job(job.id)
    assert bench.server.hold is not None
    bench.server.hold.set()
    ended = await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    listed = await bench.results.list("qwen")

    assert during is not None
    assert "benchmark of 'qwen'" in during.message
    assert other_node is None
    assert owned == (True, True, False)  # the health monitor leaves the node's models alone
    assert flag["nodes"]["gpu-1"]["servedNames"] == ["Qwen", "Llama"]
    assert flag["nodes"]["gpu-1"]["jobId"] == job.id
    assert running is not None
    assert running.state == "running"
    assert running.phase in ("warm-up", "concurrency")
    assert ended.state == "succeeded"
    assert ended.result is not None
    assert bench.maintenance.notice_for("qwen") is None
    assert bench.maintenance.owns("qwen") is False
    assert not (bench.data_dir / MAINTENANCE_FILE_NAME).exists()
    [result] = listed.results
    assert [level.concurrency for level in result.levels] == [1, 2]
    assert result.levels[1].runs[0].tokens == 8
    assert result.gpu == "skipped: the node has no GPU"
    assert result.noisy == []
    assert result.config_hash == "abcd"
    assert result.sizes == TINY
    assert result.questions is not None
    assert result.questions.correct == 1  # the stand-in answers 42 to everything


async def test_one_job_per_node_but_nodes_run_at_once(bench: Bench) -> None:
    await hold_chats(bench)
    first = await bench.jobs.start("qwen")
    with pytest.raises(JobConflictError) as conflict:
        await bench.jobs.start("llama")
    elsewhere = await bench.jobs.start("other")
    both = {view.node_id: view.state for view in bench.jobs.jobs()}
    await bench.jobs.cancel()

    assert conflict.value.job_id == first.id
    assert (conflict.value.node_id, conflict.value.model_id) == ("gpu-1", "qwen")
    assert first.id in str(conflict.value)
    assert elsewhere.node_id == "gpu-2"
    assert both == {"gpu-1": "running", "gpu-2": "running"}


async def test_refusals_before_a_job_starts(bench: Bench) -> None:
    bench.host.targets["qwen"] = replace(bench.host.targets["qwen"], state=ModelState.STARTING)

    with pytest.raises(ModelNotReadyError, match="Starting") as not_ready:
        await bench.jobs.start("qwen")
    with pytest.raises(UnknownPresetError, match="classic") as preset:
        await bench.jobs.start("llama", preset="fastest")
    with pytest.raises(UnknownModelError):
        await bench.jobs.start("nope")
    with pytest.raises(NoJobRunningError):
        await bench.jobs.cancel()

    assert not_ready.value.state == "Starting"
    assert preset.value.field == "preset"
    assert bench.jobs.jobs() == []


async def test_cancel_ends_the_job_and_always_leaves_maintenance(bench: Bench) -> None:
    await hold_chats(bench)
    job = await bench.jobs.start("qwen")
    await until_holding(bench)
    [cancelled] = await bench.jobs.cancel("gpu-1")

    assert cancelled.state == "cancelled"
    assert bench.maintenance.notice_for("qwen") is None
    assert not (bench.data_dir / MAINTENANCE_FILE_NAME).exists()
    assert (await bench.results.list("qwen")).results == []
    assert bench.jobs.job(job.id) == cancelled


async def test_a_model_deleted_mid_job_fails_it_with_the_reason(bench: Bench) -> None:
    await hold_chats(bench)
    job = await bench.jobs.start("qwen")
    await until_holding(bench)
    del bench.host.targets["qwen"]
    ended = await bench.jobs.wait(job.id, timeout_s=WAIT_S)

    assert ended.state == "failed"
    assert ended.error == "model 'qwen' was deleted during the benchmark"
    assert bench.maintenance.notice_for("qwen") is None


async def test_a_model_crashing_mid_job_fails_it_with_its_state_and_error(bench: Bench) -> None:
    await hold_chats(bench)
    job = await bench.jobs.start("qwen")
    await until_holding(bench)
    crashed = replace(bench.host.targets["qwen"], state=ModelState.FAILED, error="exit code 139")
    bench.host.targets["qwen"] = crashed
    ended = await bench.jobs.wait(job.id, timeout_s=WAIT_S)

    assert ended.state == "failed"
    assert ended.error == "model 'qwen' went Failed during the benchmark: exit code 139"
    assert not (bench.data_dir / MAINTENANCE_FILE_NAME).exists()


async def test_a_node_that_does_not_drain_in_time_makes_the_result_noisy(bench: Bench) -> None:
    bench.host.busy.add("llama")
    job = await bench.jobs.start("qwen")
    ended = await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    [result] = (await bench.results.list("qwen")).results

    assert ended.state == "succeeded"
    assert result.noisy == ["in-flight requests at start (llama)"]
    # The other model stayed busy through every run.
    assert all(run.noisy == ["model 'llama' had running requests"] for lv in result.levels for run in lv.runs)


def h200(index: int, utilization: float | None) -> GpuMemory:
    return GpuMemory(index=index, uuid=f"GPU-{index}", total_mib=143771, utilization_percent=utilization)


async def test_a_node_with_gpus_says_utilization_was_not_sampled(bench: Bench) -> None:
    # An agent from before utilization was read (or a driver that reports [N/A]).
    bench.host.node_gpus["gpu-1"] = [h200(0, None), h200(1, None)]
    job = await bench.jobs.start("qwen")
    await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    [result] = (await bench.results.list("qwen")).results

    assert result.gpu == "skipped: the node agent does not report GPU utilization"


async def test_a_busy_gpu_makes_the_result_noisy(bench: Bench) -> None:
    bench.host.node_gpus["gpu-1"] = [h200(0, 64), h200(1, 0)]
    job = await bench.jobs.start("qwen")
    ended = await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    [result] = (await bench.results.list("qwen")).results

    assert ended.state == "succeeded"
    assert result.gpu == "busy"
    assert result.noisy == ["GPU busy with work outside Mirbad (GPU 0: 64 % mean, 64 % max)"]
    assert bench.host.gpu_reads == ["gpu-1"] * 3  # sampled over the window, a fresh reading each time


async def test_an_idle_gpu_is_idle_and_not_noisy(bench: Bench) -> None:
    bench.host.node_gpus["gpu-1"] = [h200(0, 3)]
    job = await bench.jobs.start("qwen")
    await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    [result] = (await bench.results.list("qwen")).results

    assert (result.gpu, result.noisy) == ("idle", [])


async def test_a_busy_gpu_after_a_drain_that_gave_up_is_not_blamed_on_others(bench: Bench) -> None:
    bench.host.busy.add("llama")
    bench.host.node_gpus["gpu-1"] = [h200(0, 90)]
    job = await bench.jobs.start("qwen")
    await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    [result] = (await bench.results.list("qwen")).results

    assert result.gpu == "busy"
    assert result.noisy == [
        "in-flight requests at start (llama)",
        "GPU busy while the node's models still had requests in flight (GPU 0: 90 % mean, 90 % max)",
    ]


async def test_the_maintenance_state_is_persisted_and_cleared_at_boot(tmp_path: Path) -> None:
    state = MaintenanceState(tmp_path)

    await state.enter_node(
        "gpu-1", NodeMaintenance(job_id="j1", message="busy", retry_after_s=30, served_names=["Qwen"])
    )
    await state.update_node("gpu-1", 12)
    written = json.loads((tmp_path / MAINTENANCE_FILE_NAME).read_text())
    after_crash = MaintenanceState(tmp_path)
    cleared = after_crash.clear_on_boot()

    assert written["nodes"]["gpu-1"]["retryAfterS"] == 12
    notice = state.notice_for("qwen")
    assert notice is not None
    assert (notice.message, notice.retry_after_s) == ("busy", 12)
    assert state.notice_for(None) is None
    assert cleared
    assert not (tmp_path / MAINTENANCE_FILE_NAME).exists()
    assert after_crash.notice_for("qwen") is None


@dataclass
class CountingHost(FakeHost):
    """Telemetry with vLLM's prefix-cache counter: 16 cached tokens per streamed chat so far."""

    server: FakeChatServer | None = None

    def latest_metrics(self, model_id: str) -> ModelMetrics | None:
        sample = super().latest_metrics(model_id)
        assert sample is not None
        assert self.server is not None
        return sample.model_copy(update={"prefix_cache_hits_total": 16.0 * self.server.streamed})


async def test_a_preset_reads_the_prefix_cache_counter_from_a_sample_taken_after_the_questions(
    tmp_path: Path,
) -> None:
    server = FakeChatServer()
    sizes = PresetSizes(
        levels=[1],
        max_seqs_cap=1,
        repetitions=1,
        short_output_tokens=[4],
        cold_prompt_tokens=[1_000_000],
        shared_prefix_tokens=32,
        shared_prefix_questions=3,
        question_tokens=4,
    )
    async with serve_asgi(server.app) as base, httpx.AsyncClient(trust_env=False) as client:
        endpoint = ChatEndpoint(f"{base}/agent/v1/proxy/m/", client, served_name="Qwen", timeout_s=WAIT_S)
        host = CountingHost(server=server)
        host.targets["qwen"] = JobTarget(
            "qwen", "Qwen", "gpu-1", "vllm", ModelState.READY, endpoint=endpoint, max_model_len=4096
        )
        results = BenchmarkResults(tmp_path)
        jobs = BenchmarkJobs(
            host,
            results,
            MaintenanceState(tmp_path),
            sizes=TINY,
            preset_sizes=sizes,
            drain_timeout_s=0.5,
            poll_s=0.02,
        )
        async with anyio.create_task_group() as tasks:
            await tasks.start(jobs.run)
            job = await jobs.start("qwen", preset="agents")
            ended = await jobs.wait(job.id, timeout_s=WAIT_S * 3)
            tasks.cancel_scope.cancel()

        [result] = (await results.list("qwen")).results

    assert ended.state == "succeeded", ended.error
    assert result.workloads is not None
    shared = result.workloads.shared_prefix
    assert shared is not None
    # The three timed questions were streamed between the two reads: 3 times 16 cached tokens.
    assert (shared.cache_hits, shared.cache_source, shared.note) == (48.0, "vllm:prefix_cache_hits", "")


async def test_a_busy_gpu_while_a_model_of_the_node_starts_names_it(bench: Bench) -> None:
    # Maintenance keeps /v1 away, not a start by hand: a starting model loads its weights on the GPU.
    bench.host.targets["loading"] = JobTarget("loading", "Loading", "gpu-1", "vllm", ModelState.STARTING)
    bench.host.targets["gone"] = JobTarget("gone", "Gone", "gpu-1", "vllm", ModelState.STOPPED)
    bench.host.node_gpus["gpu-1"] = [h200(0, 55)]
    job = await bench.jobs.start("qwen")
    await bench.jobs.wait(job.id, timeout_s=WAIT_S)
    [result] = (await bench.results.list("qwen")).results

    assert result.gpu == "busy"
    assert result.noisy == ["GPU busy while model 'loading' was starting (GPU 0: 55 % mean, 55 % max)"]


async def test_the_eta_of_the_first_timed_run_comes_from_the_warm_ups_pace_not_the_first_guess(
    bench: Bench,
) -> None:
    # Hold the warm-up, then let it go and hold the first timed run: its ETA is what the job shows.
    await hold_chats(bench)
    job = await bench.jobs.start("qwen")
    await until_holding(bench)
    warm_up, bench.server.hold = bench.server.hold, anyio.Event()
    assert warm_up is not None
    warm_up.set()
    await eventually(
        lambda: getattr(bench.jobs.job(job.id), "phase", None) == "concurrency", timeout_s=WAIT_S
    )
    shown = bench.jobs.job(job.id)
    bench.server.hold.set()

    assert shown is not None
    assert shown.eta_s is not None
    # The first guess assumes 20 tok/s and half a minute of extras; the fake server answers at once.
    assert shown.eta_s < estimate_seconds(TINY)


def test_the_paced_eta_counts_the_runs_left_and_the_parts_after_them() -> None:
    assert paced_eta("concurrency", total_runs=10, finished_runs=4, per_run_s=2.0, first_estimate=600) == 18.0
    assert paced_eta("questions", total_runs=10, finished_runs=10, per_run_s=2.0, first_estimate=600) == 2.0
    assert paced_eta("warm-up", total_runs=10, finished_runs=0, per_run_s=None, first_estimate=600) == 600

"""The tuning API over a real master composition, the candidates run by the simulator.

The model is Ready on a fake agent; the candidate runner is :class:`SimulatedRunner` (a known best at
32 max num seqs), so the API, the job, the maintenance hold, the stored run, Apply best and the
refusals are tested without a model server (the real llama-server run is
``tests/orchestration/test_tuning_llamacpp.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, TINY, WAIT_S, chatty, ready
from tests.orchestration._fake_agent import FakeAgent

from mirbad_orchestration.commandline import TUNING_LABEL
from mirbad_orchestration.jobs import JobTarget
from mirbad_orchestration.tuning import (
    CandidateRunner,
    EtaBasis,
    EtaProjection,
    Measurement,
    PresetSimulatedRunner,
    SimulatedRunner,
)
from mirbad_protocol import ExecutableRef, ModelDefinition, ModelState
from mirbad_protocol.agent import GgufInfo
from mirbad_protocol.benchmarks import BenchmarkResult
from mirbad_protocol.tuning import TuningRequest

pytestmark = pytest.mark.anyio

BASE = Measurement(single_tok_s=50.0, many_tok_s=400.0, single_ttft_p95_s=0.2, many_ttft_p95_s=1.0)


def truth(definition: ModelDefinition) -> Measurement:
    return replace(BASE, many_tok_s=BASE.many_tok_s * (1.6 if definition.max_num_seqs == 32 else 1.0))


class Runners:
    """Hands each run a simulator; ``hold`` makes the candidates wait until it is set."""

    def __init__(self) -> None:
        self.hold: anyio.Event | None = None
        self.runners: list[SimulatedRunner] = []
        self.measuring = anyio.Event()

    async def __call__(self, target: JobTarget, saved: ModelDefinition) -> CandidateRunner:
        runners = self

        class Held(SimulatedRunner):
            async def measure(self, handle: str) -> Measurement:
                runners.measuring.set()
                if runners.hold is not None:
                    await runners.hold.wait()
                return await super().measure(handle)

        runner = Held(truth, noise=0.005, seed=len(self.runners))
        self.runners.append(runner)
        return runner


@pytest.fixture
def runners() -> Runners:
    return Runners()


@pytest.fixture
async def master(tmp_path: Path, runners: Runners) -> AsyncIterator[Master]:
    options = {"tuning_runners": runners, "tuning_repetitions": (2, 3)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


async def _ended(master: Master, job_id: str) -> dict[str, Any]:
    view = await master.services.tuning.wait(job_id, timeout_s=WAIT_S)
    return view.model_dump(mode="json", by_alias=True)


async def test_a_run_holds_the_node_stores_the_run_and_apply_best_saves_it(
    master: Master, runners: Runners
) -> None:
    await ready(master, QWEN)
    models_file = master.services.settings.data_dir / "models.json"
    before = models_file.read_bytes()
    runners.hold = anyio.Event()

    started = await master.admin.post(
        "/api/models/qwen/tune", json={"goal": "many-agents", "steps": ["max_num_seqs"]}
    )
    with anyio.fail_after(WAIT_S):
        await runners.measuring.wait()
    progress = (await master.admin.get("/api/tuning")).json()["jobs"]
    held = await master.anonymous.post(
        "/v1/chat/completions", json={"model": "Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]}
    )
    second = await master.admin.post("/api/models/qwen/tune")
    benchmark = await master.admin.post("/api/models/qwen/benchmark")
    runners.hold.set()
    job = await _ended(master, started.json()["id"])
    after = models_file.read_bytes()
    listed = (await master.admin.get("/api/models/qwen/tuning")).json()
    applied = await master.admin.post("/api/models/qwen/tuning/apply")
    saved = (await master.admin.get("/api/models/qwen")).json()

    assert started.status_code == 202
    assert started.json()["steps"] == ["max_num_seqs"]
    assert [(j["state"], j["phase"]) for j in progress] == [("running", "baseline")]
    assert held.status_code == 503
    assert held.json()["error"]["code"] == "maintenance"
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "job_conflict"
    assert benchmark.status_code == 409  # one job per node, benchmarks and tuning together
    assert job["state"] == "succeeded", job
    assert after == before  # the run never touched the registry
    [run] = listed["runs"]
    [name] = listed["files"]
    assert job["result"] == name
    assert (master.services.settings.data_dir / "tuning" / "qwen" / name).is_file()
    assert run["schemaVersion"] == 2
    assert run["winnerIsBaseline"] is False
    assert run["bestDefinition"]["maxNumSeqs"] == 32
    assert [row["outcome"] for row in run["candidates"]][:1] == ["accepted"]
    assert all(runner.live == [] and runner.restored for runner in runners.runners)
    assert applied.status_code == 200, applied.text
    assert applied.json()["definition"]["maxNumSeqs"] == 32
    assert applied.json()["restartPending"] is True
    assert saved["definition"]["maxNumSeqs"] == 32
    assert saved["status"]["state"] == "Ready"  # never restarted automatically


async def test_cancel_restores_and_leaves_the_registry_unchanged(master: Master, runners: Runners) -> None:
    await ready(master, QWEN)
    models_file = master.services.settings.data_dir / "models.json"
    before = models_file.read_bytes()
    runners.hold = anyio.Event()
    started = await master.admin.post("/api/models/qwen/tune")
    with anyio.fail_after(WAIT_S):
        await runners.measuring.wait()

    cancelled = await master.admin.delete("/api/tuning")
    nothing = await master.admin.delete("/api/tuning")

    assert cancelled.status_code == 200
    assert [job["state"] for job in cancelled.json()["jobs"]] == ["cancelled"]
    assert nothing.status_code == 404
    [runner] = runners.runners
    assert runner.live == []
    assert runner.restored
    assert models_file.read_bytes() == before
    [name] = (await master.admin.get("/api/models/qwen/tuning")).json()["files"]
    stored = json.loads((master.services.settings.data_dir / "tuning" / "qwen" / name).read_text())
    assert stored["state"] == "cancelled"
    assert started.json()["id"] == cancelled.json()["jobs"][0]["id"]


async def test_refusals_of_the_tuning_api(master: Master) -> None:
    assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201
    reranker = QWEN | {"id": "rank", "servedName": "rank", "tags": ["reranker"]}
    assert (await master.admin.post("/api/models", json=reranker)).status_code == 201
    embedder = QWEN | {"id": "embed", "servedName": "embed", "tags": ["embedding"]}
    assert (await master.admin.post("/api/models", json=embedder)).status_code == 201

    stopped = await master.admin.post("/api/models/qwen/tune")
    ranked = await master.admin.post("/api/models/rank/tune")
    embedding = await master.admin.post("/api/models/embed/tune")
    unknown = await master.admin.post(
        "/api/models/qwen/tune", json={"steps": ["max_num_seqs", "threads", "warp"]}
    )
    field = await master.admin.post("/api/models/qwen/tune", json={"goal": "balanced", "speed": 1})
    missing = await master.admin.post("/api/models/nope/tune")
    nothing = await master.admin.post("/api/models/qwen/tuning/apply")

    assert stopped.status_code == 409
    assert stopped.json()["error"]["code"] == "model_not_ready"
    assert ranked.status_code == 422
    assert ranked.json()["error"]["code"] == "preset_not_for_model"
    assert embedding.status_code == 409  # an embedding model tunes (its own dimensions) once Ready
    assert embedding.json()["error"]["code"] == "model_not_ready"
    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "unknown_tuning_step"
    assert unknown.json()["error"]["field"] == "steps"
    assert "threads, warp" in unknown.json()["error"]["message"]
    assert field.status_code == 400
    assert field.json()["error"]["field"] == "speed"
    assert missing.status_code == 404
    assert nothing.status_code == 404


@pytest.fixture
async def fleet_master(tmp_path: Path) -> AsyncIterator[Master]:
    """The product's runner (tuning instances through the agent), the suite at tiny sizes."""
    options = {"benchmark_sizes": TINY, "tuning_repetitions": (1, 2)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


async def test_the_fleet_runner_tunes_through_the_agent_and_restores_the_model(fleet_master: Master) -> None:
    master = fleet_master
    await ready(master, QWEN)
    models_file = master.services.settings.data_dir / "models.json"
    before = models_file.read_bytes()
    driver = master.local.driver

    started = await master.admin.post("/api/models/qwen/tune", json={"steps": ["max_num_seqs"]})
    job = await _ended(master, started.json()["id"])
    [run] = (await master.admin.get("/api/models/qwen/tuning")).json()["runs"]

    assert job["state"] == "succeeded", job
    tuning = [spec for spec in driver.starts if spec.model_id == "qwen-tuning"]
    assert len(tuning) >= 3  # the baseline, 8 and 32 (16 is the saved value: a duplicate)
    assert all(spec.labels == {TUNING_LABEL: "1"} for spec in tuning)
    assert [spec.model_id for spec in driver.starts][-1] == "qwen"  # restored last
    assert "qwen" in driver.stops  # its own instance made room first
    assert (await driver.status("qwen-tuning")).state is ModelState.STOPPED
    assert (await driver.status("qwen")).state is ModelState.READY
    assert [row["outcome"] for row in run["candidates"]].count("duplicate") == 1
    assert all(row["scores"] for row in run["candidates"] if row["outcome"] == "accepted")
    assert models_file.read_bytes() == before


async def test_a_leftover_tuning_instance_is_removed_and_its_model_restarted(master: Master) -> None:
    await ready(master, QWEN)
    driver = master.local.driver
    [spec] = [spec for spec in driver.starts if spec.model_id == "qwen"]
    await driver.stop("qwen")  # as a run leaves it: the model's own instance stopped ...
    await driver.start(spec.model_copy(update={"model_id": "qwen-tuning", "labels": {TUNING_LABEL: "1"}}))
    statuses = await driver.list_statuses()  # ... and a candidate still running

    done = await master.services.tuning.recover(
        master.services.runtime, await master.services.models.list(), statuses
    )

    assert done == [
        "removed the leftover tuning instance 'qwen-tuning'",
        "started 'qwen' again with its saved settings",
    ]
    assert (await driver.status("qwen-tuning")).state is ModelState.STOPPED
    assert (await driver.status("qwen")).state is ModelState.READY


def preset_truth(definition: ModelDefinition) -> Measurement:
    """The throughput preset's components: 32 sequences are best (64 share too little memory)."""
    gain = {32: 1.6, 64: 1.2}.get(definition.max_num_seqs, 1.0)
    components = {"short_n16_tok_s": 400.0 * gain, "short_max_seqs_tok_s": 800.0 * gain}
    return replace(BASE, components=components)


@pytest.fixture
async def preset_master(tmp_path: Path) -> AsyncIterator[Master]:
    """A master whose candidates are the preset simulator's."""

    async def runners(target: JobTarget, saved: ModelDefinition) -> CandidateRunner:
        return PresetSimulatedRunner(preset_truth, noise=0.005, seed=7)

    options = {"tuning_runners": runners, "tuning_repetitions": (2, 3)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


async def test_a_preset_run_searches_scores_on_the_preset_and_stores_it(preset_master: Master) -> None:
    master = preset_master
    await ready(master, QWEN)

    started = await master.admin.post(
        "/api/models/qwen/tune", json={"preset": "throughput", "search": "quick"}
    )
    job = await _ended(master, started.json()["id"])
    [run] = (await master.admin.get("/api/models/qwen/tuning")).json()["runs"]

    assert started.status_code == 202, started.text
    view = started.json()
    assert view["preset"] == "throughput"
    assert view["steps"] == ["max_num_seqs", "speculative", "refine_max_num_seqs"]
    assert view["etaS"] > 0
    assert job["state"] == "succeeded", job
    assert (run["preset"], run["search"], run["schemaVersion"]) == ("throughput", "quick", 2)
    assert run["bestDefinition"]["maxNumSeqs"] == 32
    searched = [row for row in run["candidates"] if row["step"] != "baseline"]
    assert all(row["goal"] and row["tradeoff"] for row in searched)
    assert all(row["startSeconds"] is not None for row in run["candidates"] if row["outcome"] == "accepted")


async def test_refusals_of_a_preset_run(master: Master) -> None:
    assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201

    unknown = await master.admin.post("/api/models/qwen/tune", json={"preset": "warp-speed"})
    pooling = await master.admin.post("/api/models/qwen/tune", json={"preset": "embeddings"})
    steps = await master.admin.post(
        "/api/models/qwen/tune", json={"preset": "interactive", "steps": ["kv_prefix", "threads"]}
    )

    assert unknown.status_code == 422
    assert (unknown.json()["error"]["code"], unknown.json()["error"]["field"]) == ("unknown_preset", "preset")
    assert pooling.status_code == 422
    assert pooling.json()["error"]["code"] == "preset_not_for_model"
    assert "for an embedding model" in pooling.json()["error"]["message"]
    assert steps.status_code == 422
    assert steps.json()["error"]["code"] == "unknown_tuning_step"
    assert "threads" in steps.json()["error"]["message"]


@pytest.fixture
async def fleet_preset_master(tmp_path: Path) -> AsyncIterator[Master]:
    """The product's runner with a preset's workloads at tiny sizes."""
    from tests.master.test_api_benchmarks_presets import TINY_PRESETS

    options = {"benchmark_sizes": TINY, "preset_sizes": TINY_PRESETS, "tuning_repetitions": (1, 2)}
    async with running_master(tmp_path, agent=chatty, services_options=options) as master:
        yield master


async def test_the_fleet_runner_measures_a_preset_and_reads_each_candidates_log(
    fleet_preset_master: Master,
) -> None:
    master = fleet_preset_master
    await ready(master, QWEN)

    started = await master.admin.post(
        "/api/models/qwen/tune", json={"preset": "throughput", "steps": ["max_num_seqs"]}
    )
    job = await _ended(master, started.json()["id"])
    [run] = (await master.admin.get("/api/models/qwen/tuning")).json()["runs"]

    assert job["state"] == "succeeded", job
    baseline = run["candidates"][0]
    assert baseline["outcome"] == "accepted", baseline
    assert baseline["score"] == pytest.approx(1.0, abs=0.5)
    # The agent's logs route was read for every measured candidate (the fake's lines are not vLLM's,
    # so nothing differs from the request).
    measured = [row for row in run["candidates"] if row["outcome"] in ("accepted", "rejected")]
    assert all(row["runtimeNotes"] == ["as requested"] for row in measured), measured
    assert (await master.local.driver.status("qwen-tuning")).state is ModelState.STOPPED
    assert (await master.local.driver.status("qwen")).state is ModelState.READY


async def test_the_first_eta_of_a_preset_comes_from_the_last_benchmark_with_it(preset_master: Master) -> None:
    master = preset_master
    await ready(master, QWEN)
    began = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    benchmark = BenchmarkResult(
        schema_version=2,
        preset="throughput",
        model_id="qwen",
        served_name="Qwen3-8B",
        node_id="local",
        runtime="vllm",
        started_at=began,
        finished_at=began + timedelta(seconds=120),
        repetitions=3,
    )
    await master.services.benchmarks.save(benchmark)

    started = await master.admin.post("/api/models/qwen/tune", json={"preset": "throughput"})
    await _ended(master, started.json()["id"])

    plan = master.services.tuning.plan(
        ModelDefinition.model_validate(QWEN), TuningRequest(preset="throughput")
    )
    # 40 s a repetition (120 s over 3), the default start; this master runs 2 and 3 repetitions.
    expected = EtaProjection(
        EtaBasis(repetition_s=40.0), plan.candidates, repetitions=2, confirm_repetitions=3
    )
    assert started.json()["etaS"] == pytest.approx(expected.planned())


async def test_without_the_nodes_files_the_gates_read_the_registrys_tags(master: Master) -> None:
    hybrid = ModelDefinition.model_validate(QWEN | {"tags": ["hybrid"]})
    plan = master.services.tuning.plan(hybrid, TuningRequest(preset="interactive", steps=["kv_prefix"]))
    [kv_prefix] = plan.dimensions
    assert kv_prefix.candidate(hybrid, "fp8/prefix-on").mamba_cache_mode == "align"
    plain = ModelDefinition.model_validate(QWEN)
    [kv_prefix] = master.services.tuning.plan(
        plain, TuningRequest(preset="interactive", steps=["kv_prefix"])
    ).dimensions
    assert kv_prefix.candidate(plain, "fp8/prefix-on").mamba_cache_mode is None


async def test_the_thread_counts_tried_come_from_the_node_s_reported_cores(tmp_path: Path) -> None:
    def eight_cores(node_id: str) -> FakeAgent:
        return FakeAgent(node_name=node_id, cpu_count=8 if node_id == "big" else None)

    llama = ModelDefinition(
        id="tiny",
        served_name="tiny-chat",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="test"),
        model_path="tiny.gguf",
    )
    async with running_master(tmp_path, "local", "big", agent=eight_cores) as master:
        request = TuningRequest(steps=["threads"])
        on_big = master.services.tuning.plan(llama, request, node_id="big")
        on_local = master.services.tuning.plan(llama, request, node_id="local")

    assert on_big.dimensions[0].values == (4, 8)  # half and all of the node's cores
    assert on_local.dimensions[0].values == (1, 2)  # a node that does not say: two cores assumed


async def test_the_kv_gate_reads_a_gguf_model_s_shape_on_its_node(master: Master) -> None:
    # 32 layers x 8 KV heads x 128 x 2 bytes x 2 = 128 KiB a token: 8192 tokens are 1 GiB of KV.
    header = GgufInfo(
        version=3, architecture="llama", block_count=32, head_count=32, head_count_kv=8,
        embedding_length=4096, size_bytes=4 * 1024**3,
    )  # fmt: skip
    master.local.gguf["big.gguf"] = header
    fits = QWEN | {"id": "fits", "servedName": "fits", "modelPath": "big.gguf", "memoryBudgetGiB": 6}
    tight = QWEN | {"id": "tight", "servedName": "tight", "modelPath": "big.gguf", "memoryBudgetGiB": 4.5}
    await ready(master, fits)
    started = await master.admin.post("/api/models/fits/tune", json={"search": "full"})
    await _ended(master, started.json()["id"])
    await ready(master, tight)
    skipped = await master.admin.post("/api/models/tight/tune", json={"search": "full"})
    run = await _ended(master, skipped.json()["id"])

    assert started.status_code == 202, started.text
    assert started.json()["steps"][-1] == "kv_cache_dtype"  # 6 GiB less 4 of weights holds 1 GiB of KV
    assert skipped.status_code == 202, skipped.text
    assert "kv_cache_dtype" not in skipped.json()["steps"]  # 4.5 GiB less 4 does not
    stored = (await master.admin.get("/api/models/tight/tuning")).json()["runs"][0]
    assert run["state"] == "succeeded", run
    assert any("full-length request at auto: no" in note for note in stored["notes"])


async def test_a_model_held_by_a_run_can_be_neither_edited_nor_deleted(
    master: Master, runners: Runners
) -> None:
    # Issue 31 item 16: the run stops the model and starts it again at its end, so an edit or a delete
    # in between would be undone, or come back as a model running outside the registry.
    await ready(master, QWEN)
    runners.hold = anyio.Event()
    started = await master.admin.post("/api/models/qwen/tune", json={"steps": ["max_num_seqs"]})
    with anyio.fail_after(WAIT_S):
        await runners.measuring.wait()
    edited = await master.admin.put("/api/models/qwen", json=QWEN | {"maxNumSeqs": 48})
    deleted = await master.admin.delete("/api/models/qwen")
    still = (await master.admin.get("/api/models/qwen")).json()
    runners.hold.set()
    job = await _ended(master, started.json()["id"])
    after = await master.admin.delete("/api/models/qwen")

    for refused in (edited, deleted):
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "job_conflict"
        assert (error["jobId"], error["modelId"], error["nodeId"]) == (job["id"], "qwen", "local")
    assert still["definition"]["maxNumSeqs"] != 48
    assert job["state"] == "succeeded", job
    assert after.status_code == 204


async def test_an_empty_list_of_steps_is_422_naming_steps(master: Master) -> None:
    # Issue 31 item 18: {"steps": []} started a run that tried nothing.
    await ready(master, QWEN)

    classic = await master.admin.post("/api/models/qwen/tune", json={"steps": []})
    preset = await master.admin.post("/api/models/qwen/tune", json={"preset": "interactive", "steps": []})
    jobs = (await master.admin.get("/api/tuning")).json()["jobs"]

    for refused in (classic, preset):
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("unknown_tuning_step", "steps")
        assert "at least one step" in error["message"]
    assert jobs == []

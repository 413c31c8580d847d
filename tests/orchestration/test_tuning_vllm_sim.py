"""Tuning a vLLM model on the fake vLLM's performance simulator, through a real agent and Docker.

The fake vLLM (``tests/fakes/fake_vllm.py``) models how the tuned settings change the wall time of a
stream (see its docstring); the candidates run as tuning instances of ``mirbad-agent serve`` (its
container driver on the shared dockerd, mutual TLS, its proxy carrying the suite's requests), just as
a node runs them. The model's optimum is stated by the simulator without a server first; the Docker
runs then check that the search finds it and the confirmation accepts it, that a candidate whose batch
does not fit fails alone with its cause and its container removed, that on noise alone the saved
settings are kept, and that a cancelled run leaves the registry byte for byte as it was and no tuning
container behind. Lean on purpose: two dimensions, one repetition in the search, two in the
confirmation stage, levels 1 and 8 with eight tokens each.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests._support.agent_fleet import Fleet, create_fleet
from tests._support.asgi_server import free_port
from tests._support.docker_image import RUN_LABEL
from tests._support.polling import until
from tests.fakes import fake_vllm

from mirbad_orchestration import ModelRegistry
from mirbad_orchestration.commandline import TUNING_LABEL
from mirbad_orchestration.fleet import AgentClient
from mirbad_orchestration.tuning import (
    AgentTuningInstances,
    InstanceCandidateRunner,
    Measurement,
    SimulatedRunner,
    TuningEngine,
    measurement_from_embeddings,
    plan_for,
    tuning_id,
)
from mirbad_protocol import ContainerLaunch, ModelDefinition, ModelStatus, ProcessLaunch
from mirbad_protocol.benchmarks import BenchmarkSizes, EmbeddingLevel, EmbeddingsResult, PresetSizes

# Only the Docker-tier tests take minutes; the mark orders the file, it skips nothing.
pytestmark = [pytest.mark.long(minutes=3)]

WAIT_S = 30.0
STEP_S = 0.05  # one simulated decode step: large against the proxy's per-chunk cost on a busy machine
# The tests that judge a few per cent (noise alone; one 1.3x setting among embeddings requests of a
# pass each) take longer steps: what a busy machine adds to a request is the same few milliseconds
# whatever the step, so a longer step leaves it a smaller share of the score.
FINE_STEP_S = 0.15
TOP = 8  # the suite's top level: the simulator's best max num seqs
SIZES = BenchmarkSizes(levels=[1, TOP], runs=1, max_tokens=8, prefill_tokens=64, question_tokens=4)


def _argv(*flags: str) -> Any:
    return fake_vllm.parse_args(["--model", "/models/sim", *flags])


def _balanced(flags: list[str], base: list[str]) -> float:
    """The balanced goal's score the model predicts for ``flags`` against ``base`` (the suite's levels)."""

    def speeds(args: Any) -> tuple[float, float]:
        per_wave = min(TOP, args.max_num_seqs)
        waves = math.ceil(TOP / args.max_num_seqs)
        single = 1 / fake_vllm.simulated_pace(args, 1)
        return single, TOP / (waves * fake_vllm.simulated_pace(args, per_wave))

    (single, many), (single0, many0) = speeds(_argv(*flags)), speeds(_argv(*base))
    return math.sqrt(single / single0 * many / many0)


BASE_FLAGS = ["--max-num-seqs", "4", "--max-num-batched-tokens", "2048"]


def test_the_simulator_states_its_optimum_and_prints_the_notices_vllm_prints(tmp_path: Path) -> None:
    seqs = {
        n: _balanced(["--max-num-seqs", str(n), "--max-num-batched-tokens", "2048"], BASE_FLAGS)
        for n in (4, 8, 16, 32)
    }
    assert max(seqs, key=seqs.__getitem__) == 8
    assert seqs[8] > 1.1 * seqs[16]  # well outside the noise
    assert seqs[8] > 1.1 * seqs[4]
    on8 = {
        b: _balanced(["--max-num-seqs", "8", "--max-num-batched-tokens", str(b)], BASE_FLAGS)
        for b in (2048, 8192)
    }
    assert on8[8192] > 1.2 * on8[2048]
    assert fake_vllm.batch_refusal(
        _argv("--max-num-seqs", "8", "--max-num-batched-tokens", "16384"), fake_vllm.SIM_BATCH_LIMIT
    )
    assert (
        fake_vllm.batch_refusal(
            _argv("--max-num-seqs", "8", "--max-num-batched-tokens", "8192"), fake_vllm.SIM_BATCH_LIMIT
        )
        is None
    )
    best = ["--max-num-seqs", "8", "--max-num-batched-tokens", "8192"]
    depths = {
        d: _balanced(
            [*best, "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": d})], best
        )
        for d in (1, 2, 3)
    }
    assert max(depths, key=depths.__getitem__) == 2
    for flag in (["--kv-cache-dtype", "fp8"], ["--async-scheduling"]):
        assert _balanced([*best, *flag], best) > 1.05
    assert _balanced([*best, "-cc", '{"cudagraph_mode":"NONE"}'], best) < 0.9
    # The settings' effect at zero: every configuration paces alike.
    for flags in (BASE_FLAGS, [*best, "--async-scheduling", "--kv-cache-dtype", "fp8"]):
        assert fake_vllm.simulated_pace(_argv(*flags), 4, effect=0) == fake_vllm.simulated_pace(
            _argv(), 4, effect=0
        )

    # The start-up notices, and the refusal of a batch too large as the last (error) line.
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 2})
    env = {**os.environ, "FAKE_VLLM_SIM_STEP_S": "0.01"}
    flags = ["--max-num-seqs", "8", "--max-num-batched-tokens", "16384", "--speculative-config", spec]
    argv = [sys.executable, fake_vllm.__file__, "--model", "/models/sim", *flags, "--async-scheduling"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=False)
    assert done.returncode == 1
    out = done.stdout
    assert "Chunked prefill is enabled with max_num_batched_tokens=16384." in out
    assert "Asynchronous scheduling is enabled." in out
    assert "setting cudagraph_mode=PIECEWISE" in out
    assert "max_num_scheduled_tokens is set to 16368 based on the speculative decoding settings" in out
    assert "speculative_config=SpeculativeConfig(method='mtp', model='/models/sim', num_spec_tokens=2)" in out
    # As real vLLM: the engine starts with the mode asked for, then downgrades it for spec-decode.
    assert "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>" in out
    assert out.index("setting cudagraph_mode=PIECEWISE") > out.index("Initializing a V1 LLM engine")
    assert done.stderr.splitlines()[-1].startswith(
        "ERROR fake-vllm: torch.OutOfMemoryError: CUDA out of memory"
    )


# ------------------------------------------------------------------ pooling models on the simulator runner


def test_an_embeddings_result_reads_as_input_throughput_and_latency() -> None:
    result = EmbeddingsResult(
        levels=[
            EmbeddingLevel(concurrency=1, requests=3, input_tokens_per_s=900.0, latency_p95_s=0.05),
            EmbeddingLevel(
                concurrency=16, requests=48, failed=1, input_tokens_per_s=5000.0, latency_p95_s=0.4
            ),
            EmbeddingLevel(concurrency=32, requests=96, input_tokens_per_s=6000.0, latency_p95_s=0.9),
        ],
        vectors_valid=True,
        unit_length=True,
    )
    measured = measurement_from_embeddings(result, seconds=2.0)
    # The top level is the one at 16 (the spec's guard), not the max-num-seqs level above it.
    assert (measured.single_tok_s, measured.many_tok_s) == (900.0, 5000.0)
    assert (measured.single_ttft_p95_s, measured.many_ttft_p95_s) == (0.05, 0.4)
    assert measured.error_rate == 1 / 147
    assert (measured.pooling, measured.normalized, measured.tool_call_valid) == (True, True, True)


@pytest.mark.anyio
async def test_a_pooling_model_is_tuned_on_input_throughput_its_normalization_guarded() -> None:
    gains = {4: 1.0, 8: 1.3, 16: 1.6, 32: 1.4, 64: 1.9}
    saved = ModelDefinition(
        id="embed", served_name="embed", model_path="e", max_num_seqs=4, tags=["embedding"]
    )

    def truth(definition: ModelDefinition) -> Measurement:
        return Measurement(
            single_tok_s=900.0,
            many_tok_s=4000.0 * gains[definition.max_num_seqs],
            single_ttft_p95_s=0.05,
            many_ttft_p95_s=0.2,
            pooling=True,
            normalized=definition.max_num_seqs != 64,  # the fastest changes the vectors: never a winner
        )

    runner = SimulatedRunner(truth, noise=0.005, seed=4)
    engine = TuningEngine(runner, "many-agents", repetitions=2, confirm_repetitions=3, rng=random.Random(0))
    outcome = await engine.run(saved, plan_for(saved, pooling=True))

    rows = {row.description: row for row in outcome.candidates}
    assert rows["max_num_seqs = 64"].outcome == "rejected"
    assert "normalization changed" in (rows["max_num_seqs = 64"].error or "")
    assert outcome.winner_definition is not None
    assert outcome.winner_definition.max_num_seqs == 16
    assert runner.live == []


# ------------------------------------------------------------------ the Docker tier


@dataclass
class Agent:
    """``mirbad-agent serve`` with its container driver only, in a child process."""

    fleet: Fleet
    port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def run_id() -> str:
    return os.urandom(3).hex()


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, docker_client: Any, run_id: str) -> Iterator[Agent]:
    root = tmp_path_factory.mktemp("agent")
    fleet = create_fleet()
    state_dir = root / "state"
    (root / "models").mkdir()
    fleet.save_agent(state_dir)
    network = f"mirbad-test-{run_id}"
    containers_from, port = min(free_port(), 65535 - 40), free_port()
    settings = {
        "node_name": "node-1",
        "state_dir": str(state_dir),
        "host": "127.0.0.1",
        "port": port,
        "model_roots": [str(root / "models")],
        "nvidia_smi": None,
        "telemetry_interval_s": 5,
        "graceful_shutdown_s": 2,
        "docker": {
            "enabled": True,
            "network": network,
            "gpus": False,
            "cache_host_path": str(root / "cache"),
            "port_range_start": containers_from,
            "port_range_end": containers_from + 19,
            "stop_timeout_s": 2,
        },
        "process": {"enabled": False},
        "downloads": {"enabled": False},
    }
    config_path = root / "agent.json"
    config_path.write_text(json.dumps(settings))
    log_path = root / "agent.log"
    with log_path.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "mirbad_agent", "serve", "--config", str(config_path)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    started = Agent(fleet, port, log_path, process)
    try:
        with httpx.Client(verify=fleet.master.client_context(), timeout=5, trust_env=False) as client:
            until(
                lambda: _answers(client, f"https://127.0.0.1:{port}/agent/v1/runtimes"),
                lambda: f"the agent did not answer:\n{started.log()}",
                timeout_s=WAIT_S,
            )
        yield started
    finally:
        process.terminate()
        try:
            process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(WAIT_S)
        for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            container.remove(force=True)
        for stale in docker_client.networks.list(names=[network]):
            stale.remove()


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.TransportError:
        return False


class SimInstances(AgentTuningInstances):
    """The agent's tuning instances, each container given the simulator's settings and the test's run label.

    ``on_launch`` is called after each launch (a test cancels the run there).
    """

    def __init__(self, client: AgentClient, run_id: str, env: dict[str, str], on_launch: Any = None) -> None:
        super().__init__(client, request_timeout_s=60)
        self._run_id = run_id
        self._env = env
        self._on_launch = on_launch
        self.launched: list[ContainerLaunch] = []

    async def launch(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        assert isinstance(spec, ContainerLaunch)
        spec = spec.model_copy(
            update={"env": {**spec.env, **self._env}, "labels": {**spec.labels, RUN_LABEL: self._run_id}}
        )
        self.launched.append(spec)
        status = await super().launch(spec)
        if self._on_launch is not None:
            self._on_launch(len(self.launched))
        return status


def _saved(image: str, run_id: str) -> ModelDefinition:
    return ModelDefinition(
        id=f"sim-{run_id}",
        served_name="sim-chat",
        image=image,
        model_path="sim",
        max_model_len=512,
        max_num_seqs=4,
        max_num_batched_tokens=2048,
        memory_budget_gib=0.25,
    )


def _client(agent: Agent) -> AgentClient:
    transport = httpx.AsyncHTTPTransport(verify=agent.fleet.master.client_context())
    return AgentClient("node-1", f"https://127.0.0.1:{agent.port}", transport)


def _tuning_containers(docker_client: Any, run_id: str) -> list[Any]:
    filters = {"label": [f"{TUNING_LABEL}=1", f"{RUN_LABEL}={run_id}"]}
    return list(docker_client.containers.list(all=True, filters=filters))


def _runner(instances: SimInstances) -> InstanceCandidateRunner:
    return InstanceCandidateRunner(
        instances, sizes=SIZES, startup_timeout_s=WAIT_S, cleanup_timeout_s=WAIT_S, poll_s=0.1
    )


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
    }


def _sim_env(*, effect: float, seed: int, step_s: float = STEP_S) -> dict[str, str]:
    return {
        "FAKE_VLLM_SIM_STEP_S": str(step_s),
        "FAKE_VLLM_SIM_EFFECT": str(effect),
        "FAKE_VLLM_SIM_SEED": str(seed),
    }


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.timeout(240)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's container driver")
async def test_the_search_finds_the_known_best_and_a_failing_batch_fails_alone(
    agent: Agent, image: str, run_id: str, docker_client: Any
) -> None:
    saved = _saved(image, run_id)
    client = _client(agent)
    try:
        instances = SimInstances(client, run_id, _sim_env(effect=1, seed=1))
        engine = TuningEngine(
            _runner(instances), "balanced", repetitions=1, confirm_repetitions=2, rng=random.Random(0)
        )
        outcome = await engine.run(saved, plan_for(saved, steps=["max_num_seqs", "max_num_batched_tokens"]))
    finally:
        await client.aclose()

    rows = {json.dumps(row.changes, sort_keys=True): row for row in outcome.candidates}
    assert outcome.candidates[0].outcome == "accepted"
    assert [rows[f'{{"max_num_seqs": {n}}}'].outcome for n in (8, 16, 32)] == ["accepted"] * 3
    assert rows['{"max_num_batched_tokens": 2048}'].outcome == "duplicate"
    failed = rows['{"max_num_batched_tokens": 16384}']
    assert failed.outcome == "failed", failed
    assert "CUDA out of memory" in (failed.error or ""), failed.error
    assert "max-num-seqs=8" in failed.effective_config
    # The search's best: 8 sequences (4 queue half the top level, more pay for empty slots), 8192 tokens.
    assert outcome.winner_definition is not None, outcome.notes
    best = outcome.winner_definition
    assert (best.max_num_seqs, best.max_num_batched_tokens) == (TOP, 8192), outcome.candidates
    [base_again] = [row for row in outcome.confirmation if row.changes == {}]
    assert outcome.winner is not None
    assert outcome.winner.score_min is not None
    assert base_again.score_max is not None
    assert outcome.winner.score_min > base_again.score_max
    # Every candidate ran as a labelled tuning instance under the tuning id, and none is left.
    assert {spec.model_id for spec in instances.launched} == {tuning_id(saved.id)}
    assert all(spec.labels[TUNING_LABEL] == "1" for spec in instances.launched)
    assert _tuning_containers(docker_client, run_id) == []


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.timeout(360)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's container driver")
async def test_on_noise_alone_the_confirmation_keeps_the_saved_settings(
    agent: Agent, image: str, run_id: str, docker_client: Any
) -> None:
    saved = _saved(image, run_id)
    client = _client(agent)
    try:
        instances = SimInstances(client, run_id, _sim_env(effect=0, seed=2, step_s=FINE_STEP_S))
        # The product's 5 confirmation repetitions: with wall-clock scores on a shared machine, 3 against 3
        # leave about a 1 in 20 chance per candidate that all of its repetitions land above the
        # baseline's by noise alone; 5 against 5 leave about 1 in 250, before the 5 % margin.
        engine = TuningEngine(
            _runner(instances), "balanced", repetitions=1, confirm_repetitions=5, rng=random.Random(0)
        )
        outcome = await engine.run(saved, plan_for(saved, steps=["max_num_seqs"]))
    finally:
        await client.aclose()

    assert [row.changes for row in outcome.candidates[1:]] == [{"max_num_seqs": n} for n in (8, 16, 32)]
    assert all(row.outcome != "failed" for row in outcome.candidates), outcome.candidates
    assert outcome.winner_definition is None, [(r.description, r.scores) for r in outcome.confirmation]
    assert any("saved settings are kept" in note for note in outcome.notes), outcome.notes
    assert _tuning_containers(docker_client, run_id) == []


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's container driver")
async def test_a_cancelled_run_leaves_the_registry_and_no_tuning_container(
    tmp_path: Path, agent: Agent, image: str, run_id: str, docker_client: Any
) -> None:
    saved = _saved(image, run_id)
    registry_dir = tmp_path / "data"
    await ModelRegistry(registry_dir).upsert(saved)
    before = _files(registry_dir)
    client = _client(agent)
    scope = anyio.CancelScope()

    def cancel_on_the_first_candidate(launches: int) -> None:
        if launches == 2:  # the baseline was measured; the first candidate's container is starting
            scope.cancel()

    instances = SimInstances(client, run_id, _sim_env(effect=1, seed=3), cancel_on_the_first_candidate)
    try:
        engine = TuningEngine(_runner(instances), "balanced", repetitions=1, confirm_repetitions=2)
        with scope:
            await engine.run(saved, plan_for(saved, steps=["max_num_seqs"]))
    finally:
        await client.aclose()

    assert scope.cancelled_caught
    assert len(instances.launched) == 2
    assert _tuning_containers(docker_client, run_id) == []
    assert _files(registry_dir) == before


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.timeout(150)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's container driver")
async def test_an_embedding_model_tunes_its_batching_on_the_embeddings_suite(
    agent: Agent, image: str, run_id: str, docker_client: Any
) -> None:
    saved = _saved(image, run_id).model_copy(
        update={"id": f"emb-{run_id}", "served_name": "sim-embed", "tags": ["embedding"]}
    )
    sizes = PresetSizes(embedding_levels=[1, TOP], repetitions=1, embedding_input_words=[4, 8, 16, 32])
    client = _client(agent)
    try:
        instances = SimInstances(client, run_id, _sim_env(effect=1, seed=5, step_s=FINE_STEP_S))
        runner = InstanceCandidateRunner(
            instances, startup_timeout_s=WAIT_S, cleanup_timeout_s=WAIT_S, poll_s=0.1, embeddings=sizes
        )
        engine = TuningEngine(runner, "balanced", repetitions=1, confirm_repetitions=2, rng=random.Random(0))
        plan = plan_for(saved, pooling=True, steps=["max_num_batched_tokens"])
        outcome = await engine.run(saved, plan)
    finally:
        await client.aclose()

    rows = {row.description: row for row in outcome.candidates}
    assert rows["max_num_batched_tokens = 2048"].outcome == "duplicate"
    assert rows["max_num_batched_tokens = 32768"].outcome == "failed"  # 4 x 32768 is over the batch limit
    assert "CUDA out of memory" in (rows["max_num_batched_tokens = 32768"].error or "")
    assert outcome.winner_definition is not None, [(r.description, r.scores) for r in outcome.confirmation]
    assert outcome.winner_definition.max_num_batched_tokens == 8192
    assert _tuning_containers(docker_client, run_id) == []

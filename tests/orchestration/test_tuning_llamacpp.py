"""A Quick tuning run for real: llama-server candidates as tuning instances of the process driver.

The candidates run through :class:`InstanceCandidateRunner` on the agent's own process driver (the
agent's HTTP hop aside, exactly what a node does), each under the tuning id with the tuning label,
started, waited for, measured with the classic suite at tiny sizes and removed, verified gone. Lean
on purpose: the flash-attention step (two candidates), one repetition in the search and two in the
confirmation stage; the registry's files are compared byte for byte afterwards.
"""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.processes import kill_recorded_processes
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

from mirbad_orchestration import ModelRegistry
from mirbad_orchestration.benchmarks import ChatEndpoint
from mirbad_orchestration.commandline import TUNING_LABEL
from mirbad_orchestration.tuning import (
    InstanceCandidateRunner,
    TuningEngine,
    TuningInstances,
    plan_for,
    tuning_id,
)
from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    ModelDefinition,
    ModelState,
    ModelStatus,
    ProcessLaunch,
)
from mirbad_protocol.benchmarks import BenchmarkSizes, PresetSizes
from mirbad_router import UPSTREAM_KEEPALIVE_S
from mirbad_runtime import (
    CatalogedExecutable,
    ExecutableCatalog,
    FileInstanceKeyProtector,
    PosixProcessHost,
    ProcessDriver,
    ProcessDriverConfig,
    sha256_of_file,
)
from mirbad_runtime.exceptions import ModelNotFoundError

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.anyio,
    pytest.mark.timeout(360),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process driver checks /proc"),
]

EXECUTABLE = ExecutableRef(name="llama-server", version="test")
SIZES = BenchmarkSizes(levels=[1, 2], runs=1, max_tokens=8, prefill_tokens=64, question_tokens=4)
SAVED = ModelDefinition(
    id="tiny",
    served_name="tiny-chat",
    runtime="llamacpp",
    executable=EXECUTABLE,
    model_path=TINY_MODEL_PATH,
    max_model_len=256,
    max_num_seqs=2,
    memory_budget_gib=0.5,
    extra_args=["--threads", "1"],
)


class DriverInstances(TuningInstances):
    """Tuning instances on the process driver itself, reached on their loopback port with their key."""

    def __init__(self, driver: ProcessDriver, client: httpx.AsyncClient) -> None:
        self._driver = driver
        self._client = client
        self.launched: list[ContainerLaunch | ProcessLaunch] = []

    async def launch(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        self.launched.append(spec)
        return await self._driver.start(spec)

    async def status(self, model_id: str) -> ModelStatus:
        return await self._driver.status(model_id)

    async def stop(self, model_id: str) -> None:
        try:
            await self._driver.stop(model_id)
        except ModelNotFoundError:
            return

    async def endpoint(self, model_id: str, served_name: str) -> ChatEndpoint:
        base = await self._driver.upstream_url(model_id)
        headers = await self._driver.upstream_headers(model_id)
        return ChatEndpoint(base, self._client, served_name, headers=headers, timeout_s=60)


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[ProcessDriver]:
    server = llama_server_path()
    assert server is not None
    write_tiny_gguf(tmp_path / "models" / TINY_MODEL_PATH)
    start = free_port()
    config = ProcessDriverConfig(
        state_dir=tmp_path / "state",
        model_roots=(tmp_path / "models",),
        port_range_start=start,
        port_range_end=min(start + 20, 65535),
    )
    catalog = ExecutableCatalog(
        [CatalogedExecutable(name="llama-server", version="test", path=server, sha256=sha256_of_file(server))]
    )
    keys = FileInstanceKeyProtector(tmp_path / "state" / "keys")
    async with ProcessDriver(config, host=PosixProcessHost(), catalog=catalog, keys=keys) as started:
        try:
            yield started
        finally:
            kill_recorded_processes(tmp_path / "state" / "processes.json")


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
    }


async def test_a_quick_run_tunes_llama_server_for_real(tmp_path: Path, driver: ProcessDriver) -> None:
    registry_dir = tmp_path / "data"
    await ModelRegistry(registry_dir).upsert(SAVED)
    before = _files(registry_dir)
    limits = httpx.Limits(keepalive_expiry=UPSTREAM_KEEPALIVE_S)
    async with httpx.AsyncClient(trust_env=False, timeout=60, limits=limits) as client:
        instances = DriverInstances(driver, client)
        runner = InstanceCandidateRunner(instances, sizes=SIZES, startup_timeout_s=60, cleanup_timeout_s=30)
        engine = TuningEngine(runner, "balanced", repetitions=1, confirm_repetitions=2, rng=random.Random(0))
        outcome = await engine.run(SAVED, plan_for(SAVED, steps=["flash_attn"]))

    [baseline, *candidates] = outcome.candidates
    assert baseline.outcome == "accepted"
    assert baseline.effective_config.endswith("--threads 1")
    assert [row.changes for row in candidates] == [{"flash_attn": "on"}, {"flash_attn": "off"}]
    for row in candidates:
        assert row.outcome in ("accepted", "rejected", "failed"), row
        assert "--flash-attn" in row.effective_config
    # Every candidate ran as a labelled tuning instance under the tuning id, never as the model itself.
    assert instances.launched
    assert {spec.model_id for spec in instances.launched} == {tuning_id("tiny")}
    assert all(spec.labels == {TUNING_LABEL: "1"} for spec in instances.launched)
    assert any("--flash-attn" in spec.argv for spec in instances.launched)
    # The confirmation decided honestly: a winner beat the re-measured baseline by 5 % with ranges
    # apart, or the saved settings are kept.
    assert outcome.winner is not None
    if outcome.winner_definition is not None:
        [base_again] = [row for row in outcome.confirmation if row.changes == {}]
        assert outcome.winner.score_min is not None
        assert base_again.score_max is not None
        assert outcome.winner.score_min > base_again.score_max
    else:
        assert any("saved settings are kept" in note for note in outcome.notes)
    assert (await driver.status(tuning_id("tiny"))).state is ModelState.STOPPED
    assert await driver.list_statuses() == []
    assert _files(registry_dir) == before


async def test_an_embedding_models_baseline_fits_the_products_inputs_to_its_context(
    tmp_path: Path, driver: ProcessDriver
) -> None:
    # The README's embedding example: a 256-token slot, far shorter than the product's longest input
    # (256 words). Quick tuning's baseline failed there with llama-server's bare 500 (issue 24 item 2).
    pooling = ["--threads", "1", "--embeddings", "--pooling", "mean"]
    embedding = SAVED.model_copy(update={"extra_args": pooling})
    sizes = PresetSizes(embedding_levels=[1, 2], repetitions=1)
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        runner = InstanceCandidateRunner(
            DriverInstances(driver, client), startup_timeout_s=60, cleanup_timeout_s=30, embeddings=sizes
        )
        handle = await runner.start(embedding)
        try:
            measurement = await runner.measure(handle)
        finally:
            await runner.remove(handle)

    assert sizes.embedding_input_words == [8, 32, 96, 256]
    assert measurement.error_rate == 0.0
    assert measurement.single_tok_s > 0
    assert measurement.many_tok_s > 0
    assert await driver.list_statuses() == []

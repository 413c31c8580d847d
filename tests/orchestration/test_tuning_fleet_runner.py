"""The product's tuning runner brings the model back as the registry has it when the run ends.

Issue 31 item 16: the restore started the definition captured when the run began, so a model deleted
during the run came back running outside the registry, and an edit made meanwhile was undone on the
node. The fleet here is fake agents (the runner reads the node's memory) and a fake runtime that
records what it was asked to start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.orchestration._fleet import fleet_of

from mirbad_orchestration import UnknownModelError
from mirbad_orchestration.jobs import JobTarget
from mirbad_orchestration.testing import FakeRuntime
from mirbad_orchestration.tuning import FleetTuningRunners
from mirbad_protocol import ModelDefinition, ModelState, ModelStatus

pytestmark = pytest.mark.anyio

SAVED = ModelDefinition(id="qwen", served_name="Qwen3-8B", model_path="qwen", max_num_seqs=16)
TARGET = JobTarget(
    model_id="qwen", served_name="Qwen3-8B", node_id="local", runtime="vllm", state=ModelState.READY
)


class Recording(FakeRuntime):
    """A fake runtime that keeps each definition it was asked to start."""

    def __init__(self) -> None:
        super().__init__(start_state=ModelState.READY)
        self.started: list[ModelDefinition] = []

    async def start(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        self.started.append(definition)
        return await super().start(definition, force=force)


class Registry:
    """The registry as the runner reads it at the end: ``current``, or no such model."""

    def __init__(self, current: ModelDefinition | None) -> None:
        self.current = current

    async def get(self, model_id: str) -> ModelDefinition:
        if self.current is None or self.current.id != model_id:
            raise UnknownModelError(model_id)
        return self.current


async def _restored(tmp_path: Path, registry: Registry, runtime: Recording) -> str | None:
    async with fleet_of(tmp_path, "local") as (_, nodes, clients):
        runners = FleetTuningRunners(nodes, clients, runtime, startup_timeout_s=5, definition=registry.get)
        runner = await runners(TARGET, SAVED)
        await runner.prepare()
        return await runner.restore()


async def test_an_edit_made_during_the_run_is_what_comes_back(tmp_path: Path) -> None:
    runtime = Recording()
    edited = SAVED.model_copy(update={"max_num_seqs": 48})

    note = await _restored(tmp_path, Registry(edited), runtime)

    assert note is None
    assert [definition.max_num_seqs for definition in runtime.started] == [48]
    assert runtime.running("local") == {"qwen": ModelState.READY}


async def test_a_model_deleted_during_the_run_stays_stopped(tmp_path: Path) -> None:
    runtime = Recording()

    note = await _restored(tmp_path, Registry(None), runtime)

    assert runtime.started == []
    assert runtime.running("local") == {}
    assert note is not None
    assert "deleted during the run" in note

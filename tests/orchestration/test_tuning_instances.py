"""The instance runner's bounded recovery on a hand-written node: failures, conflicts, stuck instances."""

from __future__ import annotations

import pytest

from mirbad_orchestration.benchmarks import ChatEndpoint
from mirbad_orchestration.exceptions import (
    AgentStartConflictError,
    CandidateFailedError,
    TuningInfrastructureError,
)
from mirbad_orchestration.tuning import InstanceCandidateRunner, TuningInstances, tuning_id
from mirbad_protocol import ContainerLaunch, ModelDefinition, ModelState, ModelStatus, ProcessLaunch

pytestmark = pytest.mark.anyio

SAVED = ModelDefinition(id="m", served_name="m", model_path="m")


class FakeNode(TuningInstances):
    """A node whose instances go to ``outcome`` once launched; ``conflicts`` launches are refused first."""

    def __init__(self, outcome: ModelState, *, conflicts: int = 0, stuck: bool = False) -> None:
        self.outcome = outcome
        self.conflicts = conflicts
        self.stuck = stuck
        self.states: dict[str, ModelState] = {}
        self.launches = 0

    async def launch(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        self.launches += 1
        if self.conflicts:
            self.conflicts -= 1
            raise AgentStartConflictError("local", 409, "start_conflict", "another model is starting")
        self.states[spec.model_id] = self.outcome
        return await self.status(spec.model_id)

    async def status(self, model_id: str) -> ModelStatus:
        state = self.states.get(model_id, ModelState.STOPPED)
        error = "out of memory" if state is ModelState.FAILED else None
        return ModelStatus(id=model_id, served_name="m", state=state, error=error)

    async def stop(self, model_id: str) -> None:
        if not self.stuck:
            self.states.pop(model_id, None)

    async def endpoint(self, model_id: str, served_name: str) -> ChatEndpoint:
        raise AssertionError("not measured here")


def _runner(node: FakeNode) -> InstanceCandidateRunner:
    return InstanceCandidateRunner(node, startup_timeout_s=5, cleanup_timeout_s=1, poll_s=0.01)


async def test_a_candidate_that_fails_is_recorded_with_its_cause_and_removed() -> None:
    node = FakeNode(ModelState.FAILED)
    with pytest.raises(CandidateFailedError, match="went Failed: out of memory"):
        await _runner(node).start(SAVED)
    assert node.states == {}


async def test_a_start_conflict_is_retried() -> None:
    node = FakeNode(ModelState.READY, conflicts=2)
    handle = await _runner(node).start(SAVED)
    assert handle == tuning_id("m")
    assert node.launches == 3


async def test_an_instance_that_will_not_go_stops_the_run() -> None:
    node = FakeNode(ModelState.READY, stuck=True)
    runner = _runner(node)
    handle = await runner.start(SAVED)
    with pytest.raises(TuningInfrastructureError, match="still there"):
        await runner.remove(handle)


def test_the_tuning_id_is_a_model_id_of_at_most_40_characters() -> None:
    long = "a" * 39 + "b"
    assert len(tuning_id(long)) <= 40
    assert tuning_id(long).endswith("-tuning")
    ModelDefinition(id=tuning_id(long), served_name="x", model_path="m")

"""Candidates as tuning instances on a node: started, waited for, measured with the suite, removed.

A candidate runs under the model's tuning id (``{id}-tuning``) with the label ``mirbad.tuning=1``
(never restart-pending, skipped by the health monitor), so the registry and the model's own instance
record stay untouched. :class:`TuningInstances` is the node side (:class:`AgentTuningInstances` over a
node's agent; a test passes the process driver itself). Bounded recovery: a start refused for a
conflict (another model starting) is retried until the startup timeout, then once more; a candidate
that fails to start, never becomes Ready within the startup timeout or fails its suite fails alone
after its instance is removed; an instance not verified gone within the cleanup timeout stops the run.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import httpx

from mirbad_orchestration.benchmarks import (
    ChatEndpoint,
    ClassicSuite,
    EmbeddingsSuite,
    InputLimit,
    PresetSuite,
    WorkloadPreset,
    embedding_input_limit,
)
from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB, TUNING_LABEL, build_args, launch_spec_for
from mirbad_orchestration.exceptions import (
    CandidateFailedError,
    ModelNotOnNodeError,
    NodeConflictError,
    TuningInfrastructureError,
)
from mirbad_orchestration.fleet import AgentClient
from mirbad_protocol import (
    ContainerLaunch,
    MirbadError,
    ModelDefinition,
    ModelState,
    ModelStatus,
    ProcessLaunch,
)
from mirbad_protocol.benchmarks import BenchmarkSizes, PresetSizes

from ._goals import Measurement, measurement_from_embeddings, measurement_from_outcome
from ._runner import CandidateRunner

__all__ = [
    "CLEANUP_TIMEOUT_S",
    "AgentTuningInstances",
    "InstanceCandidateRunner",
    "TuningInstances",
    "tuning_id",
]

CLEANUP_TIMEOUT_S: Final = 120.0
"""How long a removed tuning instance may take to be verified gone."""
# vLLM prints its config line early and the notices at startup; a long startup log fits in this.
_LOG_TAIL: Final = 5000
_SUFFIX: Final = "-tuning"


def tuning_id(model_id: str) -> str:
    """The id a model's tuning instances run under (a valid model id, at most 40 characters)."""
    return model_id[: 40 - len(_SUFFIX)].rstrip("-") + _SUFFIX


class TuningInstances(ABC):
    """A node's side of tuning instances."""

    @abstractmethod
    async def launch(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        """Start ``spec`` (raises ``NodeConflictError`` when the node is busy starting another)."""

    @abstractmethod
    async def status(self, model_id: str) -> ModelStatus:
        """The instance's status now (Stopped when it is gone)."""

    @abstractmethod
    async def stop(self, model_id: str) -> None:
        """Stop and remove the instance."""

    @abstractmethod
    async def endpoint(self, model_id: str, served_name: str) -> ChatEndpoint:
        """Where the Ready instance answers chats."""

    async def logs(self, model_id: str) -> list[str]:
        """The instance's log lines, oldest first (none by default: RuntimeNotes are then empty)."""
        return []


class AgentTuningInstances(TuningInstances):
    """Tuning instances on a node through its agent (its proxy carries the suite's requests)."""

    def __init__(self, client: AgentClient, *, request_timeout_s: float = 900.0) -> None:
        self._client = client
        self._request_timeout_s = request_timeout_s

    async def launch(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        """Start ``spec`` through the agent."""
        return await self._client.start(spec)

    async def status(self, model_id: str) -> ModelStatus:
        """The agent's status of the instance (Stopped when the node does not have it)."""
        try:
            return await self._client.status(model_id)
        except ModelNotOnNodeError:
            return ModelStatus(id=model_id, served_name="", state=ModelState.STOPPED)

    async def stop(self, model_id: str) -> None:
        """Stop the instance (one the node does not have is gone already)."""
        try:
            await self._client.stop(model_id)
        except ModelNotOnNodeError:
            return

    async def endpoint(self, model_id: str, served_name: str) -> ChatEndpoint:
        """The agent's proxy for the instance, with the node's mutual-TLS client."""
        base = self._client.proxy_base_url(model_id)
        return ChatEndpoint(base, self._client.http, served_name, timeout_s=self._request_timeout_s)

    async def logs(self, model_id: str) -> list[str]:
        """The instance's log through the agent's logs route (the lines RuntimeNotes read)."""
        return await self._client.logs(model_id, tail=_LOG_TAIL)


async def _nothing() -> None:
    return None


async def _no_note() -> str | None:
    return None


class InstanceCandidateRunner(CandidateRunner):
    """Runs each candidate as a tuning instance and measures it with the classic suite.

    Args:
        instances: the node's side.
        sizes: the suite's sizes (the spec's by default; a Quick test passes tiny ones).
        total_gib: the node's memory (vLLM's utilization is derived from it).
        startup_timeout_s: how long a candidate may take to become Ready.
        cleanup_timeout_s: how long a removed instance may take to be verified gone.
        poll_s: how often a wait looks again.
        prepare: makes room before the first candidate (stops the saved model's instance).
        restore: brings the saved settings back; returns a note when the model did not come back.
        preset_sizes: a workload preset run's sizes (the spec's by default).
        embeddings: a pooling model's embeddings suite sizes; each candidate is then measured by it
            at the fixed levels (never its own max num seqs, so every candidate meets the same load).
    """

    def __init__(
        self,
        instances: TuningInstances,
        *,
        sizes: BenchmarkSizes | None = None,
        total_gib: float = DEFAULT_TOTAL_GIB,
        startup_timeout_s: float = 600.0,
        cleanup_timeout_s: float = CLEANUP_TIMEOUT_S,
        poll_s: float = 0.25,
        prepare: Callable[[], Awaitable[None]] = _nothing,
        restore: Callable[[], Awaitable[str | None]] = _no_note,
        preset_sizes: PresetSizes | None = None,
        embeddings: PresetSizes | None = None,
    ) -> None:
        self._instances = instances
        self._sizes = sizes or BenchmarkSizes()
        self._total_gib = total_gib
        self._startup_timeout_s = startup_timeout_s
        self._cleanup_timeout_s = cleanup_timeout_s
        self._poll_s = poll_s
        self._prepare = prepare
        self._restore = restore
        self._embeddings = embeddings
        self._running: dict[str, ModelDefinition] = {}
        self._preset: WorkloadPreset | None = None
        self._preset_sizes = preset_sizes or PresetSizes()

    def select_preset(self, preset: WorkloadPreset | None) -> None:
        """Measure with ``preset``'s workloads (None: the classic suite)."""
        self._preset = preset

    async def log(self, handle: str) -> list[str]:
        """The instance's log lines (the node's side reads them)."""
        return await self._instances.logs(handle)

    async def prepare(self) -> None:
        """Make room (the caller's hook)."""
        await self._prepare()

    async def restore(self) -> str | None:
        """Bring the saved settings back (the caller's hook)."""
        return await self._restore()

    async def start(self, definition: ModelDefinition) -> str:
        """Launch the candidate under the tuning id and wait until it is Ready."""
        handle = tuning_id(definition.id)
        spec = launch_spec_for(
            definition.model_copy(update={"id": handle}),
            total_gib=self._total_gib,
            labels={TUNING_LABEL: "1"},
        )
        self._running[handle] = definition
        try:
            await self._launch(spec)
            await self._until_ready(handle)
        except BaseException:
            # A failed candidate, and a run cancelled while it starts too: the instance never outlives it.
            with anyio.CancelScope(shield=True):
                await self.remove(handle)
            raise
        return handle

    async def _launch(self, spec: ContainerLaunch | ProcessLaunch) -> None:
        try:
            try:
                await self._instances.launch(spec)
            except NodeConflictError:
                await self._launch_after_conflict(spec)
        except MirbadError as exc:
            raise CandidateFailedError(f"the node refused the candidate: {exc}") from exc

    async def _launch_after_conflict(self, spec: ContainerLaunch | ProcessLaunch) -> None:
        """Another model is starting on the node: try again until the startup timeout, then give up."""
        with anyio.move_on_after(self._startup_timeout_s):
            while True:
                await anyio.sleep(self._poll_s)
                try:
                    await self._instances.launch(spec)
                except NodeConflictError:
                    continue
                return
        await self._instances.launch(spec)  # the last try: its refusal fails the candidate

    async def _until_ready(self, handle: str) -> None:
        with anyio.move_on_after(self._startup_timeout_s):
            while True:
                status = await self._instances.status(handle)
                if status.state is ModelState.READY:
                    return
                if status.state in (ModelState.FAILED, ModelState.STOPPED):
                    raise CandidateFailedError(
                        f"it went {status.state.value}: {status.error or 'no reason given'}"
                    )
                await anyio.sleep(self._poll_s)
        raise CandidateFailedError(f"not Ready within {self._startup_timeout_s:g} s")

    async def measure(self, handle: str) -> Measurement:
        """One run on the instance.

        The selected preset's workloads, else the embeddings suite for a pooling model, else the
        classic suite.
        """
        definition = self._running[handle]
        started = time.monotonic()
        try:
            endpoint = await self._instances.endpoint(handle, definition.served_name)
            if self._preset is not None:
                return await self._measure_preset(endpoint, definition, started)
            if self._embeddings is not None:
                limit = self._input_limit(definition)
                embeddings = EmbeddingsSuite(endpoint, self._embeddings, max_num_seqs=None, input_limit=limit)
                result = await embeddings.run()
                return measurement_from_embeddings(result, seconds=time.monotonic() - started)
            suite = ClassicSuite(endpoint, self._sizes, max_model_len=definition.max_model_len)
            outcome = await suite.run()
        except (MirbadError, httpx.HTTPError) as exc:
            raise CandidateFailedError(f"the benchmark failed: {exc}") from exc
        return measurement_from_outcome(outcome, seconds=time.monotonic() - started)

    def _input_limit(self, definition: ModelDefinition) -> InputLimit | None:
        """The candidate's longest embeddings input, from the arguments it was launched with."""
        argv = build_args(definition, total_gib=self._total_gib)
        return embedding_input_limit(definition.runtime, argv, definition.max_model_len)

    async def _measure_preset(
        self, endpoint: ChatEndpoint, definition: ModelDefinition, started: float
    ) -> Measurement:
        assert self._preset is not None
        suite = PresetSuite(
            endpoint,
            self._preset,
            self._preset_sizes,
            max_model_len=definition.max_model_len,
            max_num_seqs=definition.max_num_seqs,
            input_limit=self._input_limit(definition),
        )
        outcome = await suite.run()
        components = outcome.components
        inputs = outcome.guard_inputs
        return Measurement(
            single_tok_s=components.get("short_n1_tok_s", 0.0),
            many_tok_s=components.get("short_n16_tok_s", 0.0),
            single_ttft_p95_s=inputs.short_ttft_p95_n1_s or 0.0,
            many_ttft_p95_s=inputs.short_ttft_p95_n16_s or 0.0,
            error_rate=inputs.failed / inputs.requests if inputs.requests else 0.0,
            tool_call_valid=inputs.tool_calls_valid >= inputs.tool_calls,
            objective_correct=inputs.objective_correct or 0,
            seconds=time.monotonic() - started,
            components=dict(components),
            guards=inputs,
        )

    async def remove(self, handle: str) -> None:
        """Stop the instance and verify it is gone within the cleanup timeout."""
        with anyio.move_on_after(self._cleanup_timeout_s):
            try:
                await self._instances.stop(handle)
                while (await self._instances.status(handle)).state is not ModelState.STOPPED:  # noqa: ASYNC110
                    await anyio.sleep(self._poll_s)
            except MirbadError as exc:
                raise TuningInfrastructureError(
                    f"tuning instance {handle!r} could not be removed: {exc}"
                ) from exc
            self._running.pop(handle, None)
            return
        raise TuningInfrastructureError(
            f"tuning instance {handle!r} is still there after {self._cleanup_timeout_s:g} s"
        )

"""A deterministic candidate runner for tests: a performance model with seeded noise.

The model is a function from a definition to its true :class:`~mirbad_orchestration.tuning.Measurement`
(or to a string: the reason it fails to start). Every repetition multiplies the speeds by a seeded
Gaussian factor around 1, so a run is reproducible and a test can say exactly where the optimum is
and how large the noise is. The runner records every start and removal, so a test can check that no
instance is left behind.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from mirbad_orchestration.exceptions import CandidateFailedError, TuningInfrastructureError
from mirbad_protocol import ModelDefinition

from ._goals import Measurement
from ._runner import CandidateRunner

__all__ = ["PerformanceModel", "SimulatedRunner"]

PerformanceModel = Callable[[ModelDefinition], Measurement | str]
"""A candidate's true measurement, or why it fails to start."""


class SimulatedRunner(CandidateRunner):
    """Runs candidates against a :data:`PerformanceModel` (see the module).

    Args:
        performance: the true measurement of each definition.
        noise: the relative standard deviation of each repetition's speeds.
        seed: seeds the noise.
        stuck: a definition whose instance cannot be removed (the run must stop), when given.
    """

    def __init__(
        self,
        performance: PerformanceModel,
        *,
        noise: float = 0.01,
        seed: int = 0,
        stuck: Callable[[ModelDefinition], bool] | None = None,
    ) -> None:
        self._performance = performance
        self._noise = noise
        self._rng = random.Random(seed)  # noqa: S311 - reproducible noise, no secret
        self._stuck = stuck or (lambda _: False)
        self._live: dict[str, ModelDefinition] = {}
        self.started: list[ModelDefinition] = []
        """Every definition started, in order."""
        self.prepared = False
        """Whether :meth:`prepare` ran."""
        self.restored = False
        """Whether :meth:`restore` ran."""

    @property
    def live(self) -> list[ModelDefinition]:
        """The instances started and not removed."""
        return list(self._live.values())

    async def prepare(self) -> None:
        """Note that room was made."""
        self.prepared = True

    async def start(self, definition: ModelDefinition) -> str:
        """Start ``definition`` unless the model says it fails."""
        self.started.append(definition)
        truth = self._performance(definition)
        if isinstance(truth, str):
            raise CandidateFailedError(truth)
        handle = f"sim-{len(self.started)}"
        self._live[handle] = definition
        return handle

    async def measure(self, handle: str) -> Measurement:
        """The true measurement with seeded noise on the speeds and latencies."""
        truth = self._performance(self._live[handle])
        assert not isinstance(truth, str)

        def jitter() -> float:
            return max(0.01, self._rng.gauss(1.0, self._noise))

        return replace(
            truth,
            single_tok_s=truth.single_tok_s * jitter(),
            many_tok_s=truth.many_tok_s * jitter(),
            single_ttft_p95_s=truth.single_ttft_p95_s * jitter(),
            many_ttft_p95_s=truth.many_ttft_p95_s * jitter(),
        )

    async def remove(self, handle: str) -> None:
        """Forget the instance, unless it is stuck."""
        if self._stuck(self._live[handle]):
            raise TuningInfrastructureError(f"instance {handle} is still there")
        del self._live[handle]

    async def restore(self) -> str | None:
        """Note that the saved settings came back."""
        self.restored = True
        return None

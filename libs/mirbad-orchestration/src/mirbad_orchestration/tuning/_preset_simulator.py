"""The simulator for the workload-preset search: score components with seeded noise, and a log.

:class:`PresetSimulatedRunner` is a :class:`~mirbad_orchestration.tuning.SimulatedRunner` whose
measurements carry a workload preset's score components (each repetition multiplied by a seeded
Gaussian factor around 1, latencies included) and whose instances have a log (a function of the
definition: the lines a real vLLM would print), so a test can check the RuntimeNotes too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mirbad_protocol import ModelDefinition

from ._goals import Measurement
from ._simulator import PerformanceModel, SimulatedRunner

__all__ = ["PresetSimulatedRunner", "SimulatedLog"]

SimulatedLog = Callable[[ModelDefinition], list[str]]
"""The log lines an instance of a definition prints."""


def _no_log(definition: ModelDefinition) -> list[str]:
    return []


class PresetSimulatedRunner(SimulatedRunner):
    """A simulator for preset runs (see the module).

    Args:
        performance: the true measurement of each definition (with its ``components``), or why it
            fails to start.
        noise: the relative standard deviation of each repetition's components.
        seed: seeds the noise.
        log: the log of each definition's instance.
        stuck: a definition whose instance cannot be removed, when given.
    """

    def __init__(
        self,
        performance: PerformanceModel,
        *,
        noise: float = 0.01,
        seed: int = 0,
        log: SimulatedLog = _no_log,
        stuck: Callable[[ModelDefinition], bool] | None = None,
    ) -> None:
        super().__init__(performance, noise=noise, seed=seed, stuck=stuck)
        self._log = log
        self._noise_sd = noise
        self._handles: dict[str, ModelDefinition] = {}

    async def start(self, definition: ModelDefinition) -> str:
        """Start ``definition`` unless the model says it fails."""
        handle = await super().start(definition)
        self._handles[handle] = definition
        return handle

    async def measure(self, handle: str) -> Measurement:
        """The true measurement with seeded noise on every component."""
        measured = await super().measure(handle)
        components = {
            key: value * max(0.01, self._rng.gauss(1.0, self._noise_sd))
            for key, value in sorted(measured.components.items())
        }
        return replace(measured, components=components)

    async def log(self, handle: str) -> list[str]:
        """The simulated log of the instance."""
        return self._log(self._handles[handle])

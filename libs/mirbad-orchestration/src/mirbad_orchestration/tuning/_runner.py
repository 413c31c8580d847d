"""The candidate runner: what the tuning engine needs from the fleet.

The engine never starts anything itself. For each candidate it asks a :class:`CandidateRunner` to
start a tuning instance with the candidate's settings and wait until it is Ready (or Failed), to run
the suite on it once per repetition, and to remove it, verified gone. Before the first candidate the
runner makes room (the saved model's own instance stops); at the end, on cancel and on failure it
restores the saved settings. The product's runner drives a node's agent
(:class:`~mirbad_orchestration.tuning.AgentCandidateRunner`); tests pass a simulator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from mirbad_orchestration.benchmarks import WorkloadPreset
from mirbad_protocol import ModelDefinition

from ._goals import Measurement

__all__ = ["CandidateRunner"]


class CandidateRunner(ABC):
    """Starts, measures and removes tuning instances of one model on one node."""

    async def prepare(self) -> None:  # noqa: B027 - optional hook: a simulator needs no room
        """Make room for the tuning instances (stop the saved model's own instance)."""

    @abstractmethod
    async def start(self, definition: ModelDefinition) -> str:
        """Start a tuning instance of ``definition`` and wait (bounded) until it is Ready.

        Returns:
            A handle for :meth:`measure` and :meth:`remove`.

        Raises:
            CandidateFailedError: it was refused, failed or never became Ready (its instance, if any,
                is removed before this is raised).
        """

    @abstractmethod
    async def measure(self, handle: str) -> Measurement:
        """Run the suite once on the instance ``handle``.

        Raises:
            CandidateFailedError: the suite failed on it.
        """

    @abstractmethod
    async def remove(self, handle: str) -> None:
        """Remove the instance ``handle`` and verify (bounded) that it is gone.

        Raises:
            TuningInfrastructureError: it is still there (the run stops and restores).
        """

    async def log(self, handle: str) -> list[str]:
        """The instance's log lines, oldest first (empty: the runner has none to read)."""
        return []

    def select_preset(self, preset: WorkloadPreset | None) -> None:  # noqa: B027 - optional hook
        """Measure with ``preset``'s workloads instead of the classic suite (None: the classic suite)."""

    async def restore(self) -> str | None:
        """Bring the saved settings back (bounded); returns a note when the model did not come back."""
        return None

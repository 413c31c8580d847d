"""What a tuning run found, shared by the engine and its confirmation stage.

:class:`Measured` is one candidate as measured; :class:`EngineOutcome` the run's rows, winner and
notes, filled as the run goes (the engine's search, then the confirmation stage), so a caller keeps
what a failed or cancelled run measured until then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirbad_protocol import ModelDefinition
from mirbad_protocol.tuning import TuningCandidate

from ._goals import Measurement

__all__ = ["EngineOutcome", "Measured"]


@dataclass
class Measured:
    """A candidate as measured: its definition, its row and its repetitions (None: it failed)."""

    definition: ModelDefinition
    candidate: TuningCandidate
    measurements: list[Measurement] | None = None


@dataclass
class EngineOutcome:
    """What a run found.

    Attributes:
        candidates: the search's candidates in the order tried (the baseline first).
        confirmation: the confirmation stage's re-measurements, in the order they ran.
        winner: the winning candidate (the baseline's re-measurement when nothing beat it).
        winner_definition: the winner's normalized definition; None when the baseline won.
        notes: guards made relative, dimensions skipped, the restore.
    """

    candidates: list[TuningCandidate] = field(default_factory=list)
    confirmation: list[TuningCandidate] = field(default_factory=list)
    winner: TuningCandidate | None = None
    winner_definition: ModelDefinition | None = None
    notes: list[str] = field(default_factory=list)

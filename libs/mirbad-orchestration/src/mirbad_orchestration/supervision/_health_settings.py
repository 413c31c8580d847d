"""The health monitor's settings and the callbacks it is given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Protocol

from mirbad_protocol import ModelDefinition

from ._start_lanes import DEFAULT_LANE_WAIT

__all__ = [
    "AUTOSTART_ACTOR",
    "IDLE_UNLOAD_ACTOR",
    "DefinitionSource",
    "HealthSettings",
    "LastUsed",
    "SkipCheck",
]

AUTOSTART_ACTOR: Final = "system:autostart"
"""The audit actor of the monitor's own starts: boot auto-start, relaunches and crash restarts."""
IDLE_UNLOAD_ACTOR: Final = "system:idle-unload"
"""The audit actor of the monitor's stops of idle models."""


@dataclass(frozen=True, kw_only=True)
class HealthSettings:
    """How the health monitor polls, restarts and unloads (all durations in seconds).

    Attributes:
        poll_interval: time between two reads of every node's statuses (HealthPollInterval).
        crash_restart: restart crashed models at all.
        crash_restart_limit: crashes in a row after which restarts pause (the limit-th crash pauses).
        crash_backoff: wait before the restart after the 1st, 2nd, 3rd... crash; the last value repeats.
        ready_resets_crashes: time a model must stay Ready for its crash count and pause to be cleared.
        startup_timeout: how long a launch of the monitor holds its node's start lane waiting for Ready.
        ready_check_interval: time between two status reads while waiting for Ready.
        lane_wait: how long a launch waits for its node's lane before counting as a failed start.
        idle_ttls: model id -> seconds without requests after which a Ready model is stopped; models
            not listed are never unloaded. The mapping is read on every poll, so a live dict works.
    """

    poll_interval: float = 5.0
    crash_restart: bool = True
    crash_restart_limit: int = 3
    crash_backoff: tuple[float, ...] = (10.0, 30.0, 60.0)
    ready_resets_crashes: float = 600.0
    startup_timeout: float = 900.0
    ready_check_interval: float = 2.0
    lane_wait: float = DEFAULT_LANE_WAIT
    idle_ttls: Mapping[str, float] = field(default_factory=dict)

    def backoff(self, crashes: int) -> float:
        """The wait before restarting a model that has crashed ``crashes`` times in a row."""
        if not self.crash_backoff:
            return 0.0
        return self.crash_backoff[min(crashes, len(self.crash_backoff)) - 1]


class DefinitionSource(Protocol):
    """Returns the saved model definitions (``ModelRegistry.list``)."""

    def __call__(self) -> Awaitable[Sequence[ModelDefinition]]:
        """The definitions, in registry order."""
        ...


SkipCheck = Callable[[str, str], bool]
"""``(model_id, node_id) -> bool``: whether something else owns the model right now (a maintenance
window, a tuning run, a job's ownership record); the monitor then neither restarts nor starts it."""

LastUsed = Callable[[str], datetime | None]
"""``model_id -> when its last request arrived`` (from the router's stats), ``None`` if never."""

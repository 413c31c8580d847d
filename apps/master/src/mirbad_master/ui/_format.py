"""How the portal writes numbers, times and states: one place, so every page says them the same way."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from mirbad_orchestration.supervision import RestartPause
from mirbad_protocol import ModelState

__all__ = [
    "DASH",
    "STATE_COLORS",
    "ago",
    "count",
    "gib",
    "memory_in_use",
    "pause_text",
    "per_second",
    "percent",
    "state_color",
]


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 request``, ``2 requests``: the noun agrees with its number (``plural`` if not ``noun + s``)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


DASH: Final = "—"
"""What a value nobody measured reads as."""

STATE_COLORS: Final = {
    ModelState.READY: "positive",
    ModelState.STARTING: "warning",
    ModelState.STOPPING: "warning",
    ModelState.FAILED: "negative",
    ModelState.STOPPED: "grey-7",
}
"""The Quasar colour of each model state's badge."""


def state_color(state: ModelState) -> str:
    """The badge colour of ``state``."""
    return STATE_COLORS.get(state, "grey-7")


def gib(value: float | None, *, digits: int = 1) -> str:
    """``12.5 GiB``; a dash for an unknown amount."""
    if value is None:
        return DASH
    return f"{value:.{digits}f} GiB"


def memory_in_use(measured_bytes: int | None, budget_gib: float | None) -> str:
    """``312 MiB measured`` where the agent measured the model, else ``budget 512 MiB``: it says which."""
    if measured_bytes is not None:
        return f"{_size(measured_bytes / 1024**3)} measured"
    return f"budget {_size(budget_gib)}" if budget_gib is not None else DASH


def _size(value_gib: float) -> str:
    # Small models are budgeted in fractions of a GiB, which read better in MiB.
    return f"{value_gib * 1024:.0f} MiB" if value_gib < 1 else gib(value_gib)


def percent(part: float | None, whole: float | None) -> float:
    """``part / whole`` clamped to 0..1, for progress bars; 0 when either is unknown."""
    if part is None or not whole or whole <= 0:
        return 0.0
    return min(max(part / whole, 0.0), 1.0)


def per_second(value: float | None, unit: str = "tok/s") -> str:
    """``42.0 tok/s``; a dash when no rate was measured."""
    if value is None:
        return DASH
    return f"{value:.1f} {unit}"


def ago(when: datetime | None, now: datetime) -> str:
    """``12 s ago``, ``3 min ago``, ``2 h ago``; ``never`` for None."""
    if when is None:
        return "never"
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def pause_text(pause: RestartPause) -> str:
    """What the Models page and the Overview say about a model whose automatic restarts are paused."""
    return f"Crashed {pause.crashes} times, automatic restarts paused"

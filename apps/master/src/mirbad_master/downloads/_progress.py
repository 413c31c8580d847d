"""A download's progress in words: whole percent, rate, time left, sizes (decimal units, as the hubs use)."""

from __future__ import annotations

from typing import Final

__all__ = ["byte_text", "eta_text", "progress_percent", "rate_text"]

_UNITS: Final = ("B", "KB", "MB", "GB", "TB")


def progress_percent(done: int, total: int) -> int:
    """Whole percent done (100 only when all bytes are there; 0 for an empty total)."""
    if total <= 0:
        return 0
    return 100 if done >= total else min(int(done * 100 / total), 99)


def rate_text(bytes_per_second: float | None) -> str:
    """``12.3 MB/s``; an em dash when not running."""
    if bytes_per_second is None:
        return "—"
    return f"{byte_text(bytes_per_second)}/s"


def eta_text(seconds: float | None) -> str:
    """``ETA 1 h 02 min`` / ``ETA 42 s``; empty when unknown."""
    if seconds is None:
        return ""
    whole = round(seconds)
    if whole >= 3600:
        return f"ETA {whole // 3600} h {whole % 3600 // 60:02d} min"
    if whole >= 60:
        return f"ETA {whole // 60} min {whole % 60:02d} s"
    return f"ETA {whole} s"


def byte_text(value: float) -> str:
    amount = float(value)
    for unit in _UNITS:
        if amount < 1000 or unit == _UNITS[-1]:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1000
    raise AssertionError("unreachable")

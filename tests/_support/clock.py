"""A wall clock for stores that take one (``clock=``): it shows one time until a test moves it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock that only moves when the test says so; it starts at ``now`` (by default the real time)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now if now is not None else datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta

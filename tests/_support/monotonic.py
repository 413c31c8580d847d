"""A stand-in for ``time.monotonic``, for code that takes a ``clock=`` in seconds (limits, throttles)."""

from __future__ import annotations


class FakeMonotonic:
    """Seconds on a monotonic clock that moves only when the test adds to :attr:`now`.

    Args:
        now: the reading at first.
    """

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """The current reading."""
        return self.now

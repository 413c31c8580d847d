"""Per-key request and token limits over a sliding 60-second window."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ._contracts import KeyGrant

__all__ = ["LimitExceeded", "RateLimiter"]


@dataclass(frozen=True)
class LimitExceeded:
    """A request refused because its key is over a limit.

    Attributes:
        kind: which limit: ``"requests"`` (per minute) or ``"tokens"`` (per minute).
        limit: the limit the key has.
        retry_after_s: how long until the window falls back under the limit.
    """

    kind: Literal["requests", "tokens"]
    limit: int
    retry_after_s: float

    @property
    def retry_after_header(self) -> str:
        """``retry_after_s`` as the whole seconds a ``Retry-After`` header carries (at least 1)."""
        return str(max(1, math.ceil(self.retry_after_s)))


@dataclass
class _Window:
    requests: deque[float] = field(default_factory=deque)
    tokens: deque[tuple[float, int]] = field(default_factory=deque)
    token_sum: int = 0

    def prune(self, horizon: float) -> None:
        # (t + 60) - 60 can land a hair below t in floating point: without the slack, a client that waited
        # exactly its Retry-After would be refused again with a zero wait.
        horizon += _CLOCK_SLACK_S
        while self.requests and self.requests[0] <= horizon:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= horizon:
            self.token_sum -= self.tokens.popleft()[1]

    @property
    def empty(self) -> bool:
        return not self.requests and not self.tokens


_CLOCK_SLACK_S = 1e-6


class RateLimiter:
    """Keeps, per key id, the times of its recent requests and token counts, and refuses over the limits.

    A sliding log rather than fixed minutes: a key with 60 requests per minute never gets 120 across a
    minute boundary. Only keys with a limit are tracked, and keys idle for a whole window are forgotten.
    Safe to share between tasks and threads.

    Args:
        window_s: the length of the window (60 s for "per minute").
        clock: monotonic seconds; tests pass a fake to move time by hand.
    """

    def __init__(self, *, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}
        self._last_sweep = clock()

    def admit(self, grant: KeyGrant) -> LimitExceeded | None:
        """Count a request of ``grant``'s key, or return why it must wait (then nothing is counted)."""
        if grant.requests_per_minute is None and grant.tokens_per_minute is None:
            return None
        with self._lock:
            now = self._clock()
            self._sweep(now)
            window = self._window(grant.key_id, now)
            refusal = _worst(self._over_requests(grant, window, now), self._over_tokens(grant, window, now))
            if refusal is None and grant.requests_per_minute is not None:
                window.requests.append(now)
            return refusal

    def add_tokens(self, grant: KeyGrant, tokens: int) -> None:
        """Count ``tokens`` (prompt plus completion) used by ``grant``'s key now."""
        if grant.tokens_per_minute is None or tokens <= 0:
            return
        with self._lock:
            now = self._clock()
            window = self._window(grant.key_id, now)
            window.tokens.append((now, tokens))
            window.token_sum += tokens

    def _window(self, key_id: str, now: float) -> _Window:
        window = self._windows.setdefault(key_id, _Window())
        window.prune(now - self._window_s)
        return window

    def _over_requests(self, grant: KeyGrant, window: _Window, now: float) -> LimitExceeded | None:
        limit = grant.requests_per_minute
        if limit is None or len(window.requests) < limit:
            return None
        # The request that frees a slot is the one `limit` places from the newest.
        freeing = window.requests[len(window.requests) - limit]
        return LimitExceeded("requests", limit, freeing + self._window_s - now)

    def _over_tokens(self, grant: KeyGrant, window: _Window, now: float) -> LimitExceeded | None:
        limit = grant.tokens_per_minute
        if limit is None or window.token_sum < limit:
            return None
        remaining = window.token_sum
        for at, tokens in window.tokens:
            remaining -= tokens
            if remaining < limit:
                return LimitExceeded("tokens", limit, at + self._window_s - now)
        return LimitExceeded("tokens", limit, self._window_s)  # pragma: no cover - the loop always returns

    def _sweep(self, now: float) -> None:
        # Once per window, drop the keys that have been idle for a whole window, so memory follows the
        # keys in use rather than every key ever seen.
        if now - self._last_sweep < self._window_s:
            return
        self._last_sweep = now
        horizon = now - self._window_s
        for key_id in list(self._windows):
            self._windows[key_id].prune(horizon)
            if self._windows[key_id].empty:
                del self._windows[key_id]


def _worst(*refusals: LimitExceeded | None) -> LimitExceeded | None:
    present = [refusal for refusal in refusals if refusal is not None]
    return max(present, key=lambda refusal: refusal.retry_after_s, default=None)

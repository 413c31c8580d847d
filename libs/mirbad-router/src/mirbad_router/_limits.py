"""Per-key request and token limits over a sliding 60-second window.

Tokens are known only once a response ends, so a request reserves its upper bound when it is admitted
and settles when it ends: the tokens it used stay in the window, the rest is released at once (all of it
when it failed before any answer; none of it when the client left before the usage came). Concurrent
requests of one key therefore cannot together pass its token limit.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ._contracts import KeyGrant

__all__ = ["LimitExceeded", "RateLimiter", "TokenReservation"]

# While in-flight reservations alone keep a request out, it fits as soon as one of them settles, which
# no clock predicts: the client is told to look again shortly.
_IN_FLIGHT_RETRY_S = 1.0


@dataclass(frozen=True)
class LimitExceeded:
    """A request refused because its key is over a limit.

    Attributes:
        kind: which limit: ``"requests"`` (per minute) or ``"tokens"`` (per minute).
        limit: the limit the key has.
        retry_after_s: how long until the window falls back under the limit.
        needed: the tokens the request needs at the least, when that alone is more than the limit:
            it can never be admitted, however long it waits.
    """

    kind: Literal["requests", "tokens"]
    limit: int
    retry_after_s: float
    needed: int | None = None

    @property
    def retry_after_header(self) -> str:
        """``retry_after_s`` as the whole seconds a ``Retry-After`` header carries (at least 1)."""
        return str(max(1, math.ceil(self.retry_after_s)))


@dataclass
class _Window:
    requests: deque[float] = field(default_factory=deque)
    tokens: deque[tuple[float, int]] = field(default_factory=deque)
    token_sum: int = 0
    reserved: int = 0

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
        return not self.requests and not self.tokens and not self.reserved


class TokenReservation:
    """The tokens one admitted request holds against its key's limit until it ends.

    Attributes:
        tokens: the tokens held (0 for a key without a token limit).
    """

    def __init__(self, limiter: RateLimiter, key_id: str, tokens: int) -> None:
        self.tokens = tokens
        self._limiter = limiter
        self._key_id = key_id
        self._settled = False

    def settle(self, used: int) -> None:
        """The request ended having used ``used`` tokens: count them now and release the rest.

        Only the first call counts, so every way a request can end may settle it.
        """
        if not self._settled:
            self._settled = True
            self._limiter._settle(self._key_id, self.tokens, max(0, used))

    def release(self) -> None:
        """The request failed before using tokens: release all of them."""
        self.settle(0)


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
        """Count a request of ``grant``'s key, or return why it must wait (then nothing is counted).

        It reserves no tokens; its usage is counted with :meth:`add_tokens`.
        """
        admitted = self.reserve(grant, 0)
        return admitted if isinstance(admitted, LimitExceeded) else None

    def reserve(
        self, grant: KeyGrant, tokens: int | None, *, least: int = 1
    ) -> TokenReservation | LimitExceeded:
        """Count a request of ``grant``'s key and hold ``tokens`` for it, or return why it must wait.

        A request needs at least ``least`` tokens free. One whose bound is unknown (``None``) or larger
        than the key's limit takes all the tokens left instead, so it runs alone; the caller then fits
        the request to the tokens held (see :func:`~mirbad_router.fit_output_to`).

        Args:
            grant: the key.
            tokens: the most tokens (prompt plus completion) the request can use, or None if unknown.
            least: the fewest tokens it can do with (see :func:`~mirbad_router.request_token_floor`);
                more than the key's limit is refused with :attr:`LimitExceeded.needed` set.
        """
        if grant.requests_per_minute is None and grant.tokens_per_minute is None:
            return TokenReservation(self, grant.key_id, 0)
        with self._lock:
            now = self._clock()
            self._sweep(now)
            window = self._window(grant.key_id, now)
            held = self._tokens_to_hold(grant, window, tokens)
            if held:
                held = max(held, least)  # a bound under the request's own floor holds the floor
            over_tokens = self._over_tokens(grant, window, now, max(held, least, 1))
            refusal = _worst(self._over_requests(grant, window, now), over_tokens)
            if refusal is not None:
                return refusal
            if grant.requests_per_minute is not None:
                window.requests.append(now)
            window.reserved += held
            return TokenReservation(self, grant.key_id, held)

    def add_tokens(self, grant: KeyGrant, tokens: int) -> None:
        """Count ``tokens`` (prompt plus completion) used by ``grant``'s key now."""
        if grant.tokens_per_minute is None or tokens <= 0:
            return
        with self._lock:
            now = self._clock()
            window = self._window(grant.key_id, now)
            window.tokens.append((now, tokens))
            window.token_sum += tokens

    def _settle(self, key_id: str, reserved: int, used: int) -> None:
        with self._lock:
            now = self._clock()
            window = self._window(key_id, now)
            window.reserved -= reserved
            if used:
                window.tokens.append((now, used))
                window.token_sum += used

    def _tokens_to_hold(self, grant: KeyGrant, window: _Window, tokens: int | None) -> int:
        limit = grant.tokens_per_minute
        if limit is None or tokens == 0:
            return 0
        if tokens is not None and tokens <= limit:
            return tokens
        return max(0, limit - window.token_sum - window.reserved)

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

    def _over_tokens(self, grant: KeyGrant, window: _Window, now: float, wanted: int) -> LimitExceeded | None:
        limit = grant.tokens_per_minute
        if limit is None:
            return None
        excess = window.token_sum + window.reserved + wanted - limit
        if excess <= 0:
            return None
        if wanted > limit:
            return LimitExceeded("tokens", limit, self._window_s, needed=wanted)
        # Settled tokens leave the window oldest first; held ones only when their requests end.
        for at, tokens in window.tokens:
            excess -= tokens
            if excess <= 0:
                return LimitExceeded("tokens", limit, at + self._window_s - now)
        return LimitExceeded("tokens", limit, _IN_FLIGHT_RETRY_S)

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

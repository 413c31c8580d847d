"""How fast anyone may guess the administrator password: per address and per account, backing off.

Every wrong password is a strike against the client's address **and** against the account. A few
strikes are free (:data:`FREE_STRIKES_PER_ADDRESS`, :data:`FREE_STRIKES_PER_ACCOUNT`); after that each
strike locks for twice as long as the one before (from :data:`FIRST_LOCK_S`, up to a cap), and while
locked every attempt is refused (429) without being checked. The account's count stops guessing spread
over many addresses; it does not lock the real administrator out: an address that signed in lately is
judged by its own strikes alone, and a request carrying a live session is never refused (whoever
holds one is in already; a wrong password it sends still counts).

An attempt is counted **before** its password is checked (and forgiven once it turns out right), so
concurrent guesses cannot all slip past the lock while the first ones are still being hashed. Strikes
are forgotten :data:`FORGET_AFTER_S` after the last one, or, for an address, when it signs in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ACCOUNT_LOCK_CAP_S",
    "ADDRESS_LOCK_CAP_S",
    "FIRST_LOCK_S",
    "FORGET_AFTER_S",
    "FREE_STRIKES_PER_ACCOUNT",
    "FREE_STRIKES_PER_ADDRESS",
    "SignInThrottle",
]

FREE_STRIKES_PER_ADDRESS: Final = 5
"""Wrong passwords one address may send before it is locked."""
FREE_STRIKES_PER_ACCOUNT: Final = 20
"""Wrong passwords from all addresses together before the account is locked to unknown addresses."""
FIRST_LOCK_S: Final = 60.0
"""The first lock; each later strike doubles it."""
ADDRESS_LOCK_CAP_S: Final = 3600.0
"""The longest lock of an address."""
ACCOUNT_LOCK_CAP_S: Final = 900.0
"""The longest lock of the account (shorter: it also holds back the administrator's new devices)."""
FORGET_AFTER_S: Final = 24 * 3600.0
"""Strikes are forgotten this long after the last one."""
_MAX_TRACKED: Final = 10_000  # addresses remembered at most (a spray of addresses must not grow memory)


@dataclass
class _Strikes:
    count: int = 0
    last: float = 0.0

    def locked_for(self, now: float, free: int, cap_s: float) -> float:
        if self.count < free:
            return 0.0
        lock = min(cap_s, FIRST_LOCK_S * 2.0 ** min(self.count - free, 32))
        return max(0.0, self.last + lock - now)


class SignInThrottle:
    """The strikes of every address and of the account, and the addresses that signed in lately.

    Args:
        clock: monotonic seconds (tests pass a fake).
        known_for_s: how long an address that signed in stays exempt from the account's lock.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, known_for_s: float) -> None:
        self._clock = clock
        self._known_for_s = known_for_s
        self._addresses: dict[str, _Strikes] = {}
        self._account = _Strikes()
        self._known: dict[str, float] = {}  # address -> until when it is exempt from the account's lock

    def locked_for(self, address: str, *, signed_in: bool = False) -> float:
        """Seconds until ``address`` may try again (0: now; always for a ``signed_in`` request)."""
        if signed_in:
            return 0.0
        now = self._clock()
        self._forget_old(now)
        strikes = self._addresses.get(address, _Strikes())
        wait = strikes.locked_for(now, FREE_STRIKES_PER_ADDRESS, ADDRESS_LOCK_CAP_S)
        if self._known.get(address, 0.0) <= now:
            wait = max(wait, self._account.locked_for(now, FREE_STRIKES_PER_ACCOUNT, ACCOUNT_LOCK_CAP_S))
        return wait

    def strike(self, address: str) -> None:
        """Count an attempt from ``address`` as wrong (before it is checked; see :meth:`forgive`)."""
        now = self._clock()
        strikes = self._addresses.pop(address, None) or _Strikes()
        self._addresses[address] = strikes  # re-inserted: the dict stays ordered by the latest strike
        for counted in (strikes, self._account):
            counted.count += 1
            counted.last = now
        while len(self._addresses) > _MAX_TRACKED:
            del self._addresses[next(iter(self._addresses))]

    def forgive(self, address: str) -> None:
        """The attempt :meth:`strike` counted was right: the address starts clean and is known."""
        self._account.count = max(0, self._account.count - 1)
        self._addresses.pop(address, None)
        self._known.pop(address, None)
        self._known[address] = self._clock() + self._known_for_s
        while len(self._known) > _MAX_TRACKED:
            del self._known[next(iter(self._known))]

    def _forget_old(self, now: float) -> None:
        while self._addresses:
            oldest = next(iter(self._addresses))
            if now - self._addresses[oldest].last < FORGET_AFTER_S:
                break
            del self._addresses[oldest]
        if self._account.count and now - self._account.last >= FORGET_AFTER_S:
            self._account = _Strikes()

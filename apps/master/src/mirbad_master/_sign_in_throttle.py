"""How fast anyone may guess the administrator password: per address, paced during a spray, decaying.

Only a password that was checked and found wrong is a strike; a right one is never refused because other
requests with it are in flight. Each address (an IPv6 client by its /64, which one machine usually holds
whole) has one check slot: its passwords are checked one at a time, and each check first looks at the
strikes the ones before it left, so concurrent guesses from one address cannot slip past its lock.

* **Per address.** :data:`FREE_STRIKES_PER_ADDRESS` wrong passwords are free; after that each strike locks
  the address for twice as long as the one before (from :data:`FIRST_LOCK_S` up to
  :data:`ADDRESS_LOCK_CAP_S`). Strikes decay: one is forgotten for every :data:`STRIKE_DECAY_S` without a
  new one, and all of them when the address signs in.
* **Known addresses.** An address that proved the password within the session lifetime is locked for at
  most :data:`FIRST_LOCK_S` at a time (a fuzzer run from the administrator's own machine cannot lock it
  out for an hour), and no spray holds it back.
* **A spray.** When :data:`SPRAY_STRIKES` wrong passwords came from all addresses together within
  :data:`SPRAY_WINDOW_S`, the account is under a spray: an unknown address that has a strike of its own
  may try once per :data:`SPRAY_PACE_S` after it. An address without strikes is always checked, so
  the administrator on a new device gets through a spray of any size, and after a typo waits at most
  :data:`SPRAY_PACE_S`; a spray gains one guess per address and minute, and each address's own lock grows.

A request carrying a live session is never refused (whoever holds one is in already; a wrong password it
sends still counts).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import anyio

__all__ = [
    "ADDRESS_LOCK_CAP_S",
    "FIRST_LOCK_S",
    "FREE_STRIKES_PER_ADDRESS",
    "SLOT_WAIT_S",
    "SPRAY_PACE_S",
    "SPRAY_STRIKES",
    "SPRAY_WINDOW_S",
    "STRIKE_DECAY_S",
    "SignInThrottle",
    "throttled_address",
]

FREE_STRIKES_PER_ADDRESS: Final = 5
"""Wrong passwords one address may send before it is locked."""
FIRST_LOCK_S: Final = 60.0
"""The first lock of an address; each later strike doubles it. Also the longest lock of a known one."""
ADDRESS_LOCK_CAP_S: Final = 3600.0
"""The longest lock of an address that has not proved the password lately."""
STRIKE_DECAY_S: Final = 600.0
"""An address's strikes shrink by one for each this long without a new one."""
SPRAY_STRIKES: Final = 20
"""Wrong passwords from all addresses together that make a spray..."""
SPRAY_WINDOW_S: Final = 900.0
"""...when they fall within this long."""
SPRAY_PACE_S: Final = 60.0
"""During a spray, how long an unknown address with a strike waits after its last one."""
SLOT_WAIT_S: Final = 10.0
"""How long a check waits for its address's slot before it is refused (429) instead."""
_MAX_TRACKED: Final = 10_000  # addresses remembered at most (a spray of addresses must not grow memory)


def throttled_address(address: str) -> str:
    """The key ``address`` is throttled under: an IPv6 address's /64, an IPv4 address itself."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address  # not an address ("unknown", a test client's name): itself
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


@dataclass
class _Strikes:
    count: int = 0
    last: float = 0.0

    def decayed(self, now: float) -> int:
        return max(0, self.count - math.floor((now - self.last) / STRIKE_DECAY_S))

    def locked_for(self, now: float, cap_s: float) -> float:
        count = self.decayed(now)
        if count < FREE_STRIKES_PER_ADDRESS:
            return 0.0
        lock = min(cap_s, FIRST_LOCK_S * 2.0 ** min(count - FREE_STRIKES_PER_ADDRESS, 32))
        return max(0.0, self.last + lock - now)


@dataclass
class _Slot:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0


class SignInThrottle:
    """The strikes of every address, the account's recent strikes, and the addresses that signed in.

    Args:
        clock: monotonic seconds (tests pass a fake).
        known_for_s: how long an address that signed in counts as known.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, known_for_s: float) -> None:
        self._clock = clock
        self._known_for_s = known_for_s
        self._addresses: dict[str, _Strikes] = {}
        self._recent = deque[float](maxlen=SPRAY_STRIKES)  # times of the account's latest strikes
        self._known: dict[str, float] = {}  # address -> until when it counts as known
        self._slots: dict[str, _Slot] = {}

    @asynccontextmanager
    async def checking(self, address: str) -> AsyncIterator[None]:
        """Hold ``address``'s check slot: one password of an address is checked at a time.

        Raises:
            TimeoutError: the slot stayed taken for :data:`SLOT_WAIT_S`.
        """
        key = throttled_address(address)
        slot = self._slots.setdefault(key, _Slot())
        slot.users += 1
        try:
            with anyio.fail_after(SLOT_WAIT_S):
                await slot.lock.acquire()
            try:
                yield
            finally:
                slot.lock.release()
        finally:
            slot.users -= 1
            if not slot.users:
                del self._slots[key]

    def locked_for(self, address: str, *, signed_in: bool = False) -> float:
        """Seconds until ``address`` may try again (0: now; always for a ``signed_in`` request)."""
        if signed_in:
            return 0.0
        now = self._clock()
        key = throttled_address(address)
        strikes = self._addresses.get(key)
        if strikes is None:
            return 0.0  # no strike of its own: checked even during a spray
        known = self._known.get(key, 0.0) > now
        wait = strikes.locked_for(now, FIRST_LOCK_S if known else ADDRESS_LOCK_CAP_S)
        if not known and strikes.decayed(now) and self._spray(now):
            wait = max(wait, strikes.last + SPRAY_PACE_S - now)
        return wait

    def strike(self, address: str) -> None:
        """Count a checked, wrong password from ``address``."""
        now = self._clock()
        key = throttled_address(address)
        strikes = self._addresses.pop(key, None) or _Strikes()
        strikes.count, strikes.last = strikes.decayed(now) + 1, now
        self._addresses[key] = strikes  # re-inserted: the dict stays ordered by the latest strike
        self._recent.append(now)
        while len(self._addresses) > _MAX_TRACKED:
            del self._addresses[next(iter(self._addresses))]

    def forgive(self, address: str) -> None:
        """``address`` gave the right password: it starts clean and is known for a while."""
        key = throttled_address(address)
        self._addresses.pop(key, None)
        self._known.pop(key, None)
        self._known[key] = self._clock() + self._known_for_s
        while len(self._known) > _MAX_TRACKED:
            del self._known[next(iter(self._known))]

    def _spray(self, now: float) -> bool:
        return len(self._recent) == SPRAY_STRIKES and now - self._recent[0] < SPRAY_WINDOW_S

"""Per-key sliding-window limits, on a hand-moved clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tests._support.monotonic import FakeMonotonic

from mirbad_router import KeyGrant, LimitExceeded, RateLimiter, TokenReservation


def _grant(rpm: int | None = None, tpm: int | None = None, key_id: str = "k1") -> KeyGrant:
    return KeyGrant(key_id=key_id, name=key_id, requests_per_minute=rpm, tokens_per_minute=tpm)


def test_keys_without_limits_are_always_admitted() -> None:
    limiter = RateLimiter()
    grant = _grant()
    assert all(limiter.admit(grant) is None for _ in range(1000))


def test_requests_per_minute_slide_with_the_oldest_request() -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    grant = _grant(rpm=2)
    assert limiter.admit(grant) is None
    clock.now += 20
    assert limiter.admit(grant) is None
    clock.now += 10
    refusal = limiter.admit(grant)
    assert refusal == LimitExceeded("requests", 2, 30.0)
    assert refusal.retry_after_header == "30"
    clock.now += 30  # the first request leaves the window
    assert limiter.admit(grant) is None
    refusal = limiter.admit(grant)
    assert refusal is not None
    assert refusal.retry_after_s == 20.0


def test_refused_requests_do_not_count() -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    grant = _grant(rpm=1)
    assert limiter.admit(grant) is None
    for _ in range(5):
        assert limiter.admit(grant) is not None
    clock.now += 60
    assert limiter.admit(grant) is None


def test_tokens_per_minute_wait_until_enough_tokens_leave_the_window() -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    grant = _grant(tpm=100)
    assert limiter.admit(grant) is None
    limiter.add_tokens(grant, 60)
    clock.now += 10
    assert limiter.admit(grant) is None
    limiter.add_tokens(grant, 60)
    clock.now += 5
    refusal = limiter.admit(grant)
    # 120 tokens used; once the first 60 leave (at +60 s from them) the window holds 60 < 100.
    assert refusal == LimitExceeded("tokens", 100, 45.0)
    clock.now += 45
    assert limiter.admit(grant) is None


def test_keys_are_limited_separately() -> None:
    limiter = RateLimiter(clock=FakeMonotonic(1000.0))
    first, second = _grant(rpm=1, key_id="a"), _grant(rpm=1, key_id="b")
    assert limiter.admit(first) is None
    assert limiter.admit(second) is None
    assert limiter.admit(first) is not None


def test_the_longer_wait_is_reported_when_both_limits_are_reached() -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    grant = _grant(rpm=1, tpm=10)
    assert limiter.admit(grant) is None
    clock.now += 30
    limiter.add_tokens(grant, 50)
    refusal = limiter.admit(grant)
    assert refusal is not None
    assert (refusal.kind, refusal.retry_after_s) == ("tokens", 60.0)


def test_retry_after_is_at_least_one_second() -> None:
    assert LimitExceeded("requests", 1, 0.01).retry_after_header == "1"
    assert LimitExceeded("requests", 1, 1.2).retry_after_header == "2"


def test_idle_keys_are_forgotten() -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    assert limiter.admit(_grant(rpm=1, key_id="old")) is None
    clock.now += 61
    assert limiter.admit(_grant(rpm=1, key_id="new")) is None
    assert list(limiter._windows) == ["new"]


@given(st.lists(st.floats(min_value=0, max_value=30), max_size=60), st.integers(min_value=1, max_value=10))
def test_never_more_than_the_limit_in_any_window_and_retry_after_is_enough(
    gaps: list[float], rpm: int
) -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    grant = _grant(rpm=rpm)
    admitted: list[float] = []
    for gap in gaps:
        clock.now += gap
        refusal = limiter.admit(grant)
        if refusal is not None:
            # Waiting as long as Retry-After says is always enough.
            clock.now += int(refusal.retry_after_header)
            assert limiter.admit(grant) is None
        admitted.append(clock.now)
    for at in admitted:
        # The limiter allows a microsecond of clock slack (floating point), so compare with the same.
        assert sum(1 for other in admitted if 0 <= at - other < 60 - 1e-6) <= rpm


# ------------------------------------------------------------------------------ token reservations


def test_a_reservation_holds_its_tokens_until_it_is_settled() -> None:
    clock = FakeMonotonic(1000.0)
    limiter = RateLimiter(clock=clock)
    grant = _grant(tpm=50)
    first = limiter.reserve(grant, 30)
    assert isinstance(first, TokenReservation)
    assert limiter.reserve(grant, 30) == LimitExceeded("tokens", 50, 1.0)  # 30 + 30 > 50, none settled
    second = limiter.reserve(grant, 20)
    assert isinstance(second, TokenReservation)
    first.settle(9)  # the unused 21 come back at once
    third = limiter.reserve(grant, 21)
    assert isinstance(third, TokenReservation)
    refusal = limiter.reserve(grant, 1)
    # 9 settled + 41 held: only the 9 leave with time, at +60 s from the settlement.
    assert refusal == LimitExceeded("tokens", 50, 60.0)


def test_a_failed_request_releases_its_whole_reservation_and_settling_twice_counts_once() -> None:
    limiter = RateLimiter(clock=FakeMonotonic(1000.0))
    grant = _grant(tpm=50)
    reservation = limiter.reserve(grant, 50)
    assert isinstance(reservation, TokenReservation)
    reservation.release()
    reservation.settle(50)  # already settled: ignored
    again = limiter.reserve(grant, 50)
    assert isinstance(again, TokenReservation)


def _ten_of_fifty_used() -> tuple[RateLimiter, KeyGrant]:
    """A limiter whose key may use 50 tokens a minute and has settled a request of 10 this minute."""
    limiter = RateLimiter(clock=FakeMonotonic(1000.0))
    grant = _grant(tpm=50)
    used = limiter.reserve(grant, 10)
    assert isinstance(used, TokenReservation)
    used.settle(10)
    return limiter, grant


def test_an_unknown_or_oversized_bound_takes_what_is_left() -> None:
    limiter, grant = _ten_of_fifty_used()
    rest = limiter.reserve(grant, None)
    assert isinstance(rest, TokenReservation)
    assert rest.tokens == 40
    assert isinstance(limiter.reserve(grant, 1), LimitExceeded)
    rest.settle(5)
    big = limiter.reserve(grant, 1000)
    assert isinstance(big, TokenReservation)
    assert big.tokens == 35


@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 40), st.booleans()), max_size=40),
    st.integers(min_value=1, max_value=100),
)
def test_settled_and_held_tokens_never_pass_the_limit_when_bounds_hold(
    requests: list[tuple[int, int, bool]], tpm: int
) -> None:
    # Each request reserves its bound and, when it ends, uses at most that (or fails and uses none);
    # whatever the interleaving, a minute never holds more than the limit.
    limiter = RateLimiter(clock=FakeMonotonic(1000.0))
    grant = _grant(tpm=tpm)
    open_reservations: list[tuple[TokenReservation, int]] = []
    settled = 0
    for bound, used, ends_one in requests:
        if ends_one and open_reservations:
            reservation, its_bound = open_reservations.pop(0)
            reservation.settle(min(used, its_bound))
            settled += min(used, its_bound)
        admitted = limiter.reserve(grant, min(bound, tpm))
        if isinstance(admitted, TokenReservation):
            open_reservations.append((admitted, admitted.tokens))
        held = sum(tokens for _, tokens in open_reservations)
        assert settled + held <= tpm


def test_a_request_needs_its_least_free_and_one_needing_more_than_the_limit_is_never_admitted() -> None:
    limiter, grant = _ten_of_fifty_used()
    assert limiter.reserve(grant, None, least=41) == LimitExceeded("tokens", 50, 60.0)
    rest = limiter.reserve(grant, None, least=40)
    assert isinstance(rest, TokenReservation)
    assert rest.tokens == 40
    rest.settle(0)
    refusal = limiter.reserve(grant, None, least=51)
    assert refusal == LimitExceeded("tokens", 50, 60.0, needed=51)


def test_a_bound_under_the_requests_floor_holds_the_floor() -> None:
    limiter = RateLimiter(clock=FakeMonotonic(1000.0))
    grant = _grant(tpm=50)
    reservation = limiter.reserve(grant, 10, least=30)  # a context smaller than the prompt's estimate
    assert isinstance(reservation, TokenReservation)
    assert reservation.tokens == 30
    assert isinstance(limiter.reserve(grant, 21), LimitExceeded)

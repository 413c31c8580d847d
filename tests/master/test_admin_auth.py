"""The administrator's password: made once, kept as an scrypt hash, throttled per address and account."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests._support.monotonic import FakeMonotonic

from mirbad_master import _admin_auth
from mirbad_master._admin_auth import (
    SESSION_LIFETIME_S,
    AdminAuth,
)
from mirbad_master._sign_in_throttle import (
    ADDRESS_LOCK_CAP_S,
    FIRST_LOCK_S,
    FREE_STRIKES_PER_ADDRESS,
    SPRAY_PACE_S,
    SPRAY_STRIKES,
    STRIKE_DECAY_S,
    SignInThrottle,
    throttled_address,
)
from mirbad_master.cli import main
from mirbad_master.exceptions import NotSignedInError, TooManyAttemptsError, WrongPasswordError

pytestmark = pytest.mark.anyio


def test_the_password_is_made_once_and_kept_hashed(tmp_path: Path) -> None:
    auth = AdminAuth(tmp_path / "data")
    password = auth.ensure_password()
    assert password is not None
    assert len(password) >= 20
    assert auth.ensure_password() is None

    raw = auth.path.read_text()
    assert password not in raw
    document = json.loads(raw)
    assert set(document["scrypt"]) == {"n", "r", "p", "salt", "key"}
    assert stat.S_IMODE(auth.path.stat().st_mode) == 0o600


async def test_right_and_wrong_passwords(tmp_path: Path) -> None:
    auth = AdminAuth(tmp_path)
    password = auth.reset_password()

    await auth.check_password(password, "10.0.0.1")
    await auth.check_password(password, "10.0.0.1")  # the remembered fast path
    with pytest.raises(WrongPasswordError):
        await auth.check_password(password + "x", "10.0.0.1")
    with pytest.raises(WrongPasswordError):
        await auth.check_password("", "10.0.0.1")


async def test_five_wrong_tries_lock_the_address_then_each_strike_doubles_the_lock(tmp_path: Path) -> None:
    clock = FakeMonotonic(1000.0)
    auth = AdminAuth(tmp_path, clock=clock)
    password = auth.reset_password()
    for _ in range(FREE_STRIKES_PER_ADDRESS):
        with pytest.raises(WrongPasswordError):
            await auth.check_password("guess", "10.0.0.1")
        clock.now += 1

    with pytest.raises(TooManyAttemptsError) as refused:
        await auth.check_password(password, "10.0.0.1")  # locked: not even the right one is looked at
    assert refused.value.retry_after_s == FIRST_LOCK_S - 1
    await auth.check_password(password, "10.0.0.2")

    clock.now += FIRST_LOCK_S
    with pytest.raises(WrongPasswordError):
        await auth.check_password("guess", "10.0.0.1")
    with pytest.raises(TooManyAttemptsError) as doubled:
        await auth.check_password(password, "10.0.0.1")
    assert doubled.value.retry_after_s == 2 * FIRST_LOCK_S

    clock.now += 2 * FIRST_LOCK_S
    await auth.check_password(password, "10.0.0.1")  # right: the address starts clean
    with pytest.raises(WrongPasswordError):
        await auth.check_password("typo", "10.0.0.1")


async def test_a_spray_from_many_addresses_never_keeps_the_administrator_out(tmp_path: Path) -> None:
    # Issue 31 item 5: 40 addresses guessing kept a new device out for up to 15 min at a time.
    clock = FakeMonotonic(1000.0)
    auth = AdminAuth(tmp_path, clock=clock)
    password = auth.reset_password()
    waits: list[tuple[int, int]] = []
    for round_ in range(3):
        for attempt in range(40):
            try:
                await auth.check_password("guess", f"203.0.113.{attempt}")
            except WrongPasswordError:
                pass
            except TooManyAttemptsError as pacing:
                waits.append((round_, pacing.retry_after_s))
        clock.now += 5
    assert waits  # the spray is paced...
    assert all(round_ > 0 and wait <= SPRAY_PACE_S for round_, wait in waits)  # ...addresses with strikes

    with pytest.raises(WrongPasswordError):
        await auth.check_password("typo", "198.51.100.7")  # a new device: checked at once
    with pytest.raises(TooManyAttemptsError) as paced:
        await auth.check_password(password, "198.51.100.7")
    assert paced.value.retry_after_s <= SPRAY_PACE_S
    clock.now += SPRAY_PACE_S
    await auth.check_password(password, "198.51.100.7")
    await auth.check_password(password, "198.51.100.8")  # another new device, at once


async def test_concurrent_right_passwords_are_never_refused(tmp_path: Path) -> None:
    # Issue 31 item 5: each Bearer call counted as a strike until checked; 20 at once got 15 x 429.
    auth = AdminAuth(tmp_path)
    password = auth.reset_password()
    outcomes: list[str] = []

    async def call() -> None:
        try:
            await auth.check_password(password, "10.0.0.5")
            outcomes.append("ok")
        except NotSignedInError as exc:
            outcomes.append(type(exc).__name__)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for _ in range(20):
                tasks.start_soon(call)
    assert outcomes == ["ok"] * 20


async def test_strikes_decay_and_a_known_address_is_locked_briefly(tmp_path: Path) -> None:
    clock = FakeMonotonic(1000.0)
    auth = AdminAuth(tmp_path, clock=clock)
    password = auth.reset_password()
    for _ in range(FREE_STRIKES_PER_ADDRESS):
        with pytest.raises(WrongPasswordError):
            await auth.check_password("guess", "10.0.0.7")
    clock.now += STRIKE_DECAY_S  # one strike forgotten: four left, under the free five
    await auth.check_password(password, "10.0.0.7")

    locks: list[int] = []
    for _ in range(3 * FREE_STRIKES_PER_ADDRESS):  # a fuzzer run from the administrator's machine
        try:
            await auth.check_password("fuzz", "10.0.0.7")
        except TooManyAttemptsError as locked:
            locks.append(locked.retry_after_s)
            clock.now += locked.retry_after_s
        except WrongPasswordError:
            pass
    assert locks
    assert max(locks) <= FIRST_LOCK_S
    clock.now += FIRST_LOCK_S
    await auth.check_password(password, "10.0.0.7")


async def test_an_ipv6_client_is_throttled_by_its_64(tmp_path: Path) -> None:
    auth = AdminAuth(tmp_path)
    password = auth.reset_password()
    for host in range(FREE_STRIKES_PER_ADDRESS):
        with pytest.raises(WrongPasswordError):
            await auth.check_password("guess", f"2001:db8:1:2::{host + 1:x}")
    with pytest.raises(TooManyAttemptsError):
        await auth.check_password(password, "2001:db8:1:2:ffff::9")  # the same /64
    await auth.check_password(password, "2001:db8:1:3::1")  # the next /64


def test_the_throttled_address() -> None:
    assert throttled_address("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64"
    assert throttled_address("::ffff:192.0.2.1") == "192.0.2.1"
    assert throttled_address("192.0.2.1") == "192.0.2.1"
    assert throttled_address("testclient") == "testclient"


async def test_every_wrong_guess_takes_the_full_scrypt_even_after_a_good_sign_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = AdminAuth(tmp_path)
    password = auth.reset_password()
    derivations: list[str] = []
    real = _admin_auth._derive

    def counting(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
        derivations.append(secret)
        return real(secret, salt, n, r, p)

    monkeypatch.setattr(_admin_auth, "_derive", counting)
    await auth.check_password(password, "client")
    await auth.check_password(password, "client")  # the verified password: recognised cheaply
    for guess in ("a", password + "x", ""):
        with pytest.raises(WrongPasswordError):
            await auth.check_password(guess, "client")

    assert derivations == [password, "a", password + "x", ""]


async def test_concurrent_guesses_cannot_slip_past_the_lock(tmp_path: Path) -> None:
    auth = AdminAuth(tmp_path)
    auth.reset_password()
    outcomes: list[type[Exception]] = []

    async def guess(number: int) -> None:
        try:
            await auth.check_password(f"guess-{number}", "10.0.0.9")
        except NotSignedInError as exc:
            outcomes.append(type(exc))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for number in range(3 * FREE_STRIKES_PER_ADDRESS):
                tasks.start_soon(guess, number)

    assert outcomes.count(WrongPasswordError) == FREE_STRIKES_PER_ADDRESS
    assert outcomes.count(TooManyAttemptsError) == 2 * FREE_STRIKES_PER_ADDRESS


_ATTACKS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=60), st.floats(min_value=0, max_value=300)), max_size=300
)


@settings(max_examples=60, deadline=None)
@given(_ATTACKS, st.integers(min_value=0, max_value=FREE_STRIKES_PER_ADDRESS - 1))
def test_a_new_device_is_never_held_by_a_spray_longer_than_its_pace(
    attempts: list[tuple[int, float]], typos: int
) -> None:
    # Whatever the spray does, the administrator on an address of their own gets their passwords
    # checked at once, and after each of a few typos within one pace.
    clock = FakeMonotonic(1000.0)
    throttle = SignInThrottle(clock=clock, known_for_s=SESSION_LIFETIME_S)
    for address, pause in attempts:
        clock.now += pause
        if throttle.locked_for(f"10.1.0.{address}") == 0:
            throttle.strike(f"10.1.0.{address}")
    for _ in range(typos):
        assert throttle.locked_for("192.0.2.50") <= SPRAY_PACE_S
        clock.now += throttle.locked_for("192.0.2.50")
        throttle.strike("192.0.2.50")
    assert throttle.locked_for("192.0.2.50") <= SPRAY_PACE_S


@settings(max_examples=60, deadline=None)
@given(_ATTACKS)
def test_a_spray_gains_one_guess_per_address_and_pace(attempts: list[tuple[int, float]]) -> None:
    clock = FakeMonotonic(1000.0)
    throttle = SignInThrottle(clock=clock, known_for_s=SESSION_LIFETIME_S)
    start = clock.now
    checked: dict[int, int] = {}
    for address, pause in attempts:
        clock.now += pause
        if throttle.locked_for(f"10.1.0.{address}") == 0:
            throttle.strike(f"10.1.0.{address}")
            checked[address] = checked.get(address, 0) + 1

    elapsed = clock.now - start
    # Past the spray's first strikes, each address gets at most one guess per pace (and fewer once
    # its own lock grows): the spray's reach grows with its addresses, not with its speed.
    assert sum(checked.values()) <= SPRAY_STRIKES + len(checked) * (1 + elapsed / SPRAY_PACE_S)
    for count in checked.values():
        assert count <= FREE_STRIKES_PER_ADDRESS + 1 + elapsed / SPRAY_PACE_S
    assert ADDRESS_LOCK_CAP_S >= SPRAY_PACE_S


async def test_sessions_last_until_idle_signed_out_or_reset(tmp_path: Path) -> None:
    clock = FakeMonotonic(1000.0)
    auth = AdminAuth(tmp_path, clock=clock)
    password = auth.reset_password()
    token = await auth.sign_in(password, "client")
    await auth.check_session(token)

    clock.now += SESSION_LIFETIME_S - 1
    await auth.check_session(token)  # used: its lifetime starts over
    clock.now += SESSION_LIFETIME_S - 1
    await auth.check_session(token)
    clock.now += SESSION_LIFETIME_S
    with pytest.raises(WrongPasswordError):
        await auth.check_session(token)

    other = await auth.sign_in(password, "client")
    auth.sign_out(other)
    with pytest.raises(WrongPasswordError):
        await auth.check_session(other)
    with pytest.raises(WrongPasswordError):
        await auth.sign_in("nope", "client")


async def test_a_reset_in_another_process_ends_sessions_and_the_old_password(tmp_path: Path) -> None:
    auth = AdminAuth(tmp_path)
    old = auth.reset_password()
    token = await auth.sign_in(old, "client")

    new = AdminAuth(tmp_path).reset_password()  # as `mirbad admin reset-password` does

    with pytest.raises(WrongPasswordError):
        await auth.check_session(token)
    with pytest.raises(WrongPasswordError):
        await auth.check_password(old, "client")
    await auth.check_password(new, "client")


async def test_an_unusable_password_file_lets_nobody_in(tmp_path: Path) -> None:
    auth = AdminAuth(tmp_path)
    auth.reset_password()
    auth.path.write_text("{}")

    with pytest.raises(NotSignedInError, match="unusable"):
        await auth.check_password("anything", "client")


async def test_mirbad_admin_reset_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    assert main(["admin", "reset-password", "--data-dir", str(data_dir)]) == 0

    out = capsys.readouterr().out
    password = out.splitlines()[0].rsplit(" ", 1)[1]
    await AdminAuth(data_dir).check_password(password, "client")


async def test_mirbad_admin_reset_password_from_a_file_prints_nothing_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # How the Kubernetes master takes its password from a Secret (deploy/k8s/master.yaml).
    data_dir = tmp_path / "data"
    secret = tmp_path / "admin-password"
    secret.write_text("correct horse battery staple\n")
    assert main(["admin", "reset-password", "--data-dir", str(data_dir), "--password-file", str(secret)]) == 0

    out = capsys.readouterr().out
    assert "correct horse" not in out
    assert f"set from {secret}" in out
    await AdminAuth(data_dir).check_password("correct horse battery staple", "client")


def test_a_short_password_file_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "admin-password"
    secret.write_text("short\n")
    data_dir = tmp_path / "data"
    with pytest.raises(SystemExit) as exited:
        main(["admin", "reset-password", "--data-dir", str(data_dir), "--password-file", str(secret)])
    assert exited.value.code == 2
    assert "--password-file" in capsys.readouterr().err
    assert not (data_dir / "admin.json").exists()

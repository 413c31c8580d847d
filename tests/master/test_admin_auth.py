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
    NotSignedInError,
    TooManyAttemptsError,
    WrongPasswordError,
)
from mirbad_master._sign_in_throttle import (
    ACCOUNT_LOCK_CAP_S,
    FIRST_LOCK_S,
    FREE_STRIKES_PER_ACCOUNT,
    FREE_STRIKES_PER_ADDRESS,
    SignInThrottle,
)
from mirbad_master.cli import main

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


async def test_guesses_spread_over_addresses_lock_the_account_but_not_the_administrator(
    tmp_path: Path,
) -> None:
    clock = FakeMonotonic(1000.0)
    auth = AdminAuth(tmp_path, clock=clock)
    password = auth.reset_password()
    await auth.check_password(password, "192.168.1.10")  # the administrator's machine, known from now on
    session = await auth.sign_in(password, "192.168.1.11")
    for attempt in range(FREE_STRIKES_PER_ACCOUNT):
        with pytest.raises(WrongPasswordError):
            await auth.check_password("guess", f"203.0.113.{attempt}")

    with pytest.raises(TooManyAttemptsError):
        await auth.check_password(password, "203.0.113.200")  # a fresh address: the account is locked
    await auth.check_password(password, "192.168.1.10")  # signed in lately from here
    assert await auth.has_session(session)
    await auth.sign_in(password, "198.51.100.7", signed_in=True)  # a live session's request

    clock.now += ACCOUNT_LOCK_CAP_S
    await auth.check_password(password, "203.0.113.200")


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


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=60), st.floats(min_value=0, max_value=300)),
        max_size=300,
    )
)
def test_no_spread_of_addresses_guesses_faster_than_the_account_allows(
    attempts: list[tuple[int, float]],
) -> None:
    clock = FakeMonotonic(1000.0)
    throttle = SignInThrottle(clock=clock, known_for_s=SESSION_LIFETIME_S)
    start = clock.now
    checked = 0
    for address, pause in attempts:
        clock.now += pause
        if throttle.locked_for(f"10.1.0.{address}") == 0:
            throttle.strike(f"10.1.0.{address}")
            checked += 1

    elapsed = clock.now - start
    # 20 free, then locks of 60, 120, 240, 480 s and the 900 s cap: at most a handful more per cap.
    assert checked <= FREE_STRIKES_PER_ACCOUNT + 6 + elapsed / ACCOUNT_LOCK_CAP_S


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

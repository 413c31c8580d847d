"""The administrator's password: made once, kept as an scrypt hash, limited to five wrong tries a minute."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from mirbad_master._admin_auth import (
    ATTEMPT_WINDOW_S,
    MAX_FAILED_ATTEMPTS,
    SESSION_LIFETIME_S,
    AdminAuth,
    AdminAuthError,
    TooManyAttemptsError,
    WrongPasswordError,
)
from mirbad_master.cli import main

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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


async def test_five_wrong_tries_a_minute_then_429_for_that_client_only(tmp_path: Path) -> None:
    clock = Clock()
    auth = AdminAuth(tmp_path, clock=clock)
    password = auth.reset_password()
    for _ in range(MAX_FAILED_ATTEMPTS):
        with pytest.raises(WrongPasswordError):
            await auth.check_password("guess", "10.0.0.1")
        clock.now += 1

    with pytest.raises(TooManyAttemptsError) as refused:
        await auth.check_password(password, "10.0.0.1")
    assert refused.value.retry_after_s == ATTEMPT_WINDOW_S - MAX_FAILED_ATTEMPTS
    await auth.check_password(password, "10.0.0.2")

    clock.now += ATTEMPT_WINDOW_S
    await auth.check_password(password, "10.0.0.1")


async def test_sessions_last_until_idle_signed_out_or_reset(tmp_path: Path) -> None:
    clock = Clock()
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

    with pytest.raises(AdminAuthError, match="unusable"):
        await auth.check_password("anything", "client")


async def test_mirbad_admin_reset_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    assert main(["admin", "reset-password", "--data-dir", str(data_dir)]) == 0

    out = capsys.readouterr().out
    password = out.splitlines()[0].rsplit(" ", 1)[1]
    await AdminAuth(data_dir).check_password(password, "client")

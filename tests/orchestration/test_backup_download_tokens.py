"""One-time download tokens: once, for two minutes, for the backup they were issued for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.backups import DOWNLOAD_TOKEN_TTL, BackupDownloadTokens

NAME = "mirbad-backup-lab-20261206T051730Z.json"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_token_works_once_for_its_backup_and_names_who_asked() -> None:
    tokens = BackupDownloadTokens(clock=Clock())
    issued = tokens.issue(NAME, "user:admin")

    taken = tokens.take(issued.token)

    assert taken is not None
    assert (taken.name, taken.issued_to) == (NAME, "user:admin")
    assert tokens.take(issued.token) is None


@given(late=st.integers(min_value=0, max_value=3600))
def test_a_token_stops_working_two_minutes_after_it_was_issued(late: int) -> None:
    clock = Clock()
    tokens = BackupDownloadTokens(clock=clock)
    issued = tokens.issue(NAME, "user:admin")
    clock.now += timedelta(seconds=late)

    taken = tokens.take(issued.token)

    assert issued.expires_at == Clock().now + DOWNLOAD_TOKEN_TTL
    assert (taken is not None) is (timedelta(seconds=late) < DOWNLOAD_TOKEN_TTL)


def test_tokens_are_unguessable_and_an_unknown_one_is_nothing() -> None:
    tokens = BackupDownloadTokens(clock=Clock())
    issued = {tokens.issue(NAME, "user:admin").token for _ in range(50)}

    assert len(issued) == 50
    assert all(len(token) >= 40 for token in issued)
    assert tokens.take("") is None
    assert tokens.take("not-a-token") is None


def test_the_table_stays_bounded_dropping_the_oldest() -> None:
    clock = Clock()
    tokens = BackupDownloadTokens(clock=clock)
    first = tokens.issue(NAME, "user:admin")
    for _ in range(1000):
        clock.now += timedelta(microseconds=1)
        last = tokens.issue(NAME, "user:admin")

    assert tokens.take(first.token) is None
    assert tokens.take(last.token) is not None

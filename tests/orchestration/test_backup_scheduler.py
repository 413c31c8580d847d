"""The backup scheduler over a real directory: one a day, on demand, pruned, failures recorded."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from tests.orchestration._backups import PASSPHRASE, contents

from mirbad_orchestration.backups import (
    BackupContents,
    BackupScheduler,
    BackupSettings,
    open_secrets,
    parse_backup,
)
from mirbad_orchestration.exceptions import BackupPassphraseTooShortError, BackupRunError
from mirbad_orchestration.testing import FakeClock

pytestmark = pytest.mark.anyio

START = datetime(2026, 12, 6, 3, 0, 0, 250_000, tzinfo=UTC)


class FakeBuild:
    """Composes the sample contents, records what it was asked, and fails when told to."""

    def __init__(self) -> None:
        self.calls: list[bool] = []
        self.failure: Exception | None = None

    async def __call__(self, *, secrets: bool) -> BackupContents:
        self.calls.append(secrets)
        if self.failure is not None:
            raise self.failure
        return contents(secrets=secrets)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def build() -> FakeBuild:
    return FakeBuild()


def _scheduler(build: FakeBuild, clock: FakeClock, directory: Path | None, keep: int = 7) -> BackupScheduler:
    return BackupScheduler(
        build, BackupSettings(directory=directory, keep=keep), host="Master-Box", clock=clock
    )


def _names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


async def test_the_first_scheduled_run_writes_the_days_backup(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    written = await scheduler.run_scheduled()
    assert written is not None
    assert written.name == "mirbad-backup-master-box-20261206T030000Z.json"
    assert _names(tmp_path) == [written.name]  # no temporary file left beside it
    path = tmp_path / written.name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    backup = parse_backup(path.read_bytes())
    assert not backup.encrypted
    assert backup.document.created_at == START.replace(microsecond=0)
    assert build.calls == [False]
    state = scheduler.state
    assert state.last_backup is not None
    assert state.last_backup.name == written.name
    assert state.last_backup.size_bytes == path.stat().st_size
    assert state.last_backup.scheduled
    assert not state.last_backup.encrypted
    assert state.last_failure is None


async def test_one_backup_a_day(build: FakeBuild, clock: FakeClock, tmp_path: Path) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    assert await scheduler.run_scheduled() is not None
    await clock.advance(timedelta(hours=23, minutes=59))
    assert await scheduler.run_scheduled() is None
    await clock.advance(timedelta(minutes=1))
    assert await scheduler.run_scheduled() is not None
    assert len(_names(tmp_path)) == 2


async def test_a_restarted_master_reads_the_day_from_the_directory(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    assert await _scheduler(build, clock, tmp_path).run_scheduled() is not None
    await clock.advance(timedelta(hours=5))
    assert await _scheduler(build, clock, tmp_path).run_scheduled() is None


async def test_back_up_now_with_a_passphrase_writes_an_encrypted_backup(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    written = await scheduler.back_up_now(PASSPHRASE)
    backup = parse_backup((tmp_path / written.name).read_bytes())
    assert backup.encrypted
    secrets = open_secrets(backup, PASSPHRASE)
    assert secrets.share_password == "nas-secret"
    assert secrets.ca is not None
    assert build.calls == [True]
    assert scheduler.state.last_backup is not None
    assert scheduler.state.last_backup.encrypted
    assert not scheduler.state.last_backup.scheduled
    # It counts as the day's backup.
    assert await scheduler.run_scheduled() is None


async def test_the_ca_setting_reaches_the_document(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    settings = BackupSettings(directory=tmp_path, include_ca=False)
    scheduler = BackupScheduler(build, settings, host="m", clock=clock)
    written = await scheduler.back_up_now(PASSPHRASE)
    assert open_secrets(parse_backup((tmp_path / written.name).read_bytes()), PASSPHRASE).ca is None


async def test_back_up_now_without_a_passphrase_asks_for_no_secrets(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    written = await _scheduler(build, clock, tmp_path).back_up_now()
    assert not parse_backup((tmp_path / written.name).read_bytes()).encrypted
    assert build.calls == [False]


async def test_a_short_passphrase_is_refused_without_a_failure_recorded(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    with pytest.raises(BackupPassphraseTooShortError):
        await scheduler.back_up_now("short")
    assert build.calls == []
    assert scheduler.state.last_failure is None
    assert _names(tmp_path) == []


async def test_a_missing_directory_is_recorded_never_created(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    missing = tmp_path / "backups"
    scheduler = _scheduler(build, clock, missing)
    assert await scheduler.run_scheduled() is None
    failure = scheduler.state.last_failure
    assert failure is not None
    assert str(missing) in failure.reason
    assert failure.scheduled
    assert failure.at == START
    assert not missing.exists()
    with pytest.raises(BackupRunError, match="does not exist"):
        await scheduler.back_up_now()
    assert scheduler.state.last_failure is not None
    assert not scheduler.state.last_failure.scheduled
    assert not missing.exists()


async def test_a_build_failure_is_recorded_on_schedule_and_raised_on_demand(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    build.failure = OSError("registry unreadable")
    assert await scheduler.run_scheduled() is None
    assert scheduler.state.last_failure is not None
    assert "registry unreadable" in scheduler.state.last_failure.reason
    with pytest.raises(BackupRunError, match="registry unreadable"):
        await scheduler.back_up_now()
    assert _names(tmp_path) == []
    build.failure = None
    assert await scheduler.run_scheduled() is not None
    # The failure stays visible beside the later success; the portal compares their times.
    assert scheduler.state.last_failure is not None
    assert scheduler.state.last_backup is not None


async def test_no_directory_set_means_no_scheduled_backups(build: FakeBuild, clock: FakeClock) -> None:
    scheduler = _scheduler(build, clock, None)
    assert await scheduler.run_scheduled() is None
    assert scheduler.state.last_failure is None
    with pytest.raises(BackupRunError, match="no backup directory"):
        await scheduler.back_up_now()


async def test_pruned_to_the_newest_keep_of_this_host_only(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    others = [
        "mirbad-backup-other-host-20200101T000000Z.json",
        "notes.txt",
        "mirbad-backup-master-box-20200101T000000Z.json.bak",
    ]
    for name in others:
        (tmp_path / name).write_text("{}")
    scheduler = _scheduler(build, clock, tmp_path, keep=2)
    written = []
    for _ in range(4):
        done = await scheduler.back_up_now()
        written.append(done.name)
        await clock.advance(timedelta(hours=1))
    assert _names(tmp_path) == sorted([*others, *written[-2:]])


async def test_a_symlink_with_a_backup_name_is_neither_counted_nor_pruned(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    backups = tmp_path / "backups"
    backups.mkdir()
    link = backups / "mirbad-backup-master-box-20261206T020000Z.json"
    link.symlink_to(outside)
    scheduler = _scheduler(build, clock, backups, keep=1)
    assert await scheduler.run_scheduled() is not None  # the link does not count as today's backup
    assert link.is_symlink()
    assert outside.exists()


async def test_the_loop_writes_once_a_day(build: FakeBuild, clock: FakeClock, tmp_path: Path) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: scheduler.run_forever(check_interval_s=3600, sleep=clock.sleep))
            await clock.settle()
            assert len(_names(tmp_path)) == 1
            await clock.advance(timedelta(hours=23))
            assert len(_names(tmp_path)) == 1
            await clock.advance(timedelta(hours=1))
            assert len(_names(tmp_path)) == 2
            group.cancel_scope.cancel()


def test_keep_must_leave_at_least_one() -> None:
    with pytest.raises(ValueError, match="keep"):
        BackupSettings(keep=0)


async def test_two_backups_in_one_second_keep_both(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    scheduler = _scheduler(build, clock, tmp_path)
    first = await scheduler.back_up_now(PASSPHRASE)
    second = await scheduler.back_up_now()
    assert first.name != second.name
    assert second.created_at - first.created_at == timedelta(seconds=1)
    assert parse_backup((tmp_path / first.name).read_bytes()).encrypted
    created = parse_backup((tmp_path / second.name).read_bytes()).document.created_at
    assert created == second.created_at  # the document says the time its name says


async def test_the_backup_just_written_survives_a_clock_set_back(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    later = "mirbad-backup-master-box-20300101T000000Z.json"
    (tmp_path / later).write_text("{}")
    written = await _scheduler(build, clock, tmp_path, keep=1).back_up_now()
    assert _names(tmp_path) == sorted([later, written.name])


async def test_a_destination_that_says_no_skips_the_day_and_says_why(
    build: FakeBuild, clock: FakeClock, tmp_path: Path
) -> None:
    answers: list[str | None] = ["the share is configured but not mounted there", None]
    asked: list[Path] = []

    async def check(directory: Path) -> str | None:
        asked.append(directory)
        return answers.pop(0)

    scheduler = BackupScheduler(
        build, BackupSettings(directory=tmp_path), host="master-box", clock=clock, destination_check=check
    )
    assert await scheduler.run_scheduled() is None
    skipped = scheduler.state.last_failure
    assert _names(tmp_path) == []
    assert build.calls == []
    written = await scheduler.run_scheduled()
    on_demand = await scheduler.back_up_now()  # asked for by a person: written where they said

    assert skipped is not None
    assert skipped.scheduled
    assert skipped.reason == "the scheduled backup was skipped: the share is configured but not mounted there"
    assert written is not None
    assert _names(tmp_path) == sorted([written.name, on_demand.name])
    assert asked == [tmp_path, tmp_path]

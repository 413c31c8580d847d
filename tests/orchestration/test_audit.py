"""The audit log: append-only JSON lines, a file per UTC day rotated by size, bounded fields, retention."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import anyio
import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.stores import AUDIT_FOLDER_NAME, AuditLog
from mirbad_orchestration.testing import FakeClock

pytestmark = pytest.mark.anyio


async def test_lines_are_golden(tmp_path: Path, snapshot_json: SnapshotAssertion) -> None:
    clock = FakeClock(datetime(2025, 3, 1, 9, 30, tzinfo=UTC))
    log = AuditLog(tmp_path, clock=clock)
    await log.record("user:admin", "model.start", "qwen3-8b", node_id="spark")
    await clock.advance(timedelta(seconds=42))
    await log.record(
        "system:autostart", "model.start", "qwen3-8b", outcome="failed", node_id="spark", detail="no memory"
    )
    await clock.advance(timedelta(minutes=5))
    await log.record("key:ci", "model.stop", "qwen3-8b", outcome="refused", detail="maintenance")

    text = (tmp_path / AUDIT_FOLDER_NAME / "2025-03-01.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n")
    assert text.splitlines() == snapshot_json


async def test_read_returns_the_days_entries(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2025, 3, 1, 23, 59, tzinfo=UTC))
    log = AuditLog(tmp_path, clock=clock)
    first = await log.record("user:admin", "model.start", "a")
    await clock.advance(timedelta(minutes=2))
    second = await log.record("user:admin", "model.stop", "a")

    assert await log.read(date(2025, 3, 1)) == [first]
    assert await log.read(date(2025, 3, 2)) == [second]
    assert await log.read(date(2025, 3, 3)) == []


@dataclass(frozen=True)
class _Job:
    model_id: str
    node_id: str


async def test_a_cancel_of_several_jobs_is_one_line_per_job(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=FakeClock(datetime(2025, 3, 1, 9, 30, tzinfo=UTC)))
    await log.record_jobs("user:admin", "model.tune.cancel", [_Job("a", "spark"), _Job("b", "pc")])
    await log.record_jobs("user:admin", "model.tune.cancel", [])

    entries = await log.read(date(2025, 3, 1))
    assert [(e.action, e.target, e.node_id) for e in entries] == [
        ("model.tune.cancel", "a", "spark"),
        ("model.tune.cancel", "b", "pc"),
    ]


async def test_days_are_utc_days(tmp_path: Path) -> None:
    local = timezone(timedelta(hours=2))
    log = AuditLog(tmp_path, clock=lambda: datetime(2025, 3, 2, 1, 0, tzinfo=local))
    entry = await log.record("user:admin", "model.start", "a")
    assert entry.at == datetime(2025, 3, 1, 23, 0, tzinfo=UTC)
    assert (tmp_path / AUDIT_FOLDER_NAME / "2025-03-01.jsonl").exists()


async def test_long_fields_are_cut(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, max_field_chars=10)
    entry = await log.record("user:admin", "model.start", "a", detail="x" * 1000)
    assert entry.detail == "xxxxxxxxx…"
    assert (await log.read(entry.at.date()))[0].detail == "xxxxxxxxx…"


async def test_a_torn_line_is_skipped_when_reading(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=lambda: datetime(2025, 3, 1, tzinfo=UTC))
    await log.record("user:admin", "model.start", "a")
    with (tmp_path / AUDIT_FOLDER_NAME / "2025-03-01.jsonl").open("a") as handle:
        handle.write('{"at":"2025-03-01T00:00:00Z","act')
    assert [e.target for e in await log.read(date(2025, 3, 1))] == ["a"]


async def test_old_days_are_pruned_when_a_new_day_starts(tmp_path: Path) -> None:
    folder = tmp_path / AUDIT_FOLDER_NAME
    folder.mkdir()
    for name in ("2025-01-01.jsonl", "2025-02-28.jsonl", "notes.jsonl"):
        (folder / name).write_text("")
    log = AuditLog(tmp_path, clock=lambda: datetime(2025, 3, 1, tzinfo=UTC), keep_days=1)
    await log.record("user:admin", "model.start", "a")
    assert sorted(p.name for p in folder.iterdir()) == ["2025-02-28.jsonl", "2025-03-01.jsonl", "notes.jsonl"]


async def test_files_are_private_to_their_owner(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=lambda: datetime(2025, 3, 1, tzinfo=UTC))
    await log.record("user:admin", "model.start", "a")
    if os.name == "posix":
        assert (tmp_path / AUDIT_FOLDER_NAME / "2025-03-01.jsonl").stat().st_mode & 0o077 == 0


async def test_a_write_failure_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / AUDIT_FOLDER_NAME).write_text("a file where the folder should be")
    log = AuditLog(tmp_path)
    entry = await log.record("user:admin", "model.start", "a")
    assert entry.action == "model.start"
    assert "audit line not written" in caplog.text


async def test_the_days_file_is_rotated_by_size_and_read_back_whole(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2025, 3, 1, 9, 30, tzinfo=UTC))
    log = AuditLog(tmp_path, clock=clock, max_file_bytes=200)
    for number in range(10):
        await log.record("user:admin", "model.start", f"m{number}")
        await clock.advance(timedelta(seconds=1))

    folder = tmp_path / AUDIT_FOLDER_NAME
    names = {p.name for p in folder.iterdir()}
    assert {"2025-03-01.jsonl", "2025-03-01.1.jsonl"} <= names
    assert all(p.stat().st_size <= 200 for p in folder.iterdir())
    assert [e.target for e in await log.read(date(2025, 3, 1))] == [f"m{n}" for n in range(10)]


async def test_a_line_longer_than_the_rotation_size_gets_a_file_of_its_own(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, clock=lambda: datetime(2025, 3, 1, tzinfo=UTC), max_file_bytes=10)
    await log.record("user:admin", "model.start", "a")
    await log.record("user:admin", "model.start", "b")
    names = sorted(p.name for p in (tmp_path / AUDIT_FOLDER_NAME).iterdir())
    assert names == ["2025-03-01.1.jsonl", "2025-03-01.jsonl"]
    assert [e.target for e in await log.read(date(2025, 3, 1))] == ["a", "b"]


async def test_a_restarted_log_appends_to_the_days_last_file(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2025, 3, 1, 9, 30, tzinfo=UTC))
    for target in ("a", "b", "c", "d"):
        # A new log each time, as after a master restart: it finds the day's newest file on disk.
        await AuditLog(tmp_path, clock=clock, max_file_bytes=250).record("user:admin", "model.start", target)
    names = sorted(p.name for p in (tmp_path / AUDIT_FOLDER_NAME).iterdir())
    assert names == ["2025-03-01.1.jsonl", "2025-03-01.jsonl"]
    assert [e.target for e in await AuditLog(tmp_path).read(date(2025, 3, 1))] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("left_behind", [b"", b'{"at":"2025-03-01T09:30:05Z","actor":"us'])
async def test_a_crash_mid_rotation_loses_no_line(tmp_path: Path, left_behind: bytes) -> None:
    clock = FakeClock(datetime(2025, 3, 1, 9, 30, tzinfo=UTC))
    log = AuditLog(tmp_path, clock=clock, max_file_bytes=250)  # two lines a file
    for target in ("a", "b"):
        await log.record("user:admin", "model.start", target)
    folder = tmp_path / AUDIT_FOLDER_NAME
    # What a crash while rotating leaves: the next file created, empty or with a torn first line.
    (folder / "2025-03-01.1.jsonl").write_bytes(left_behind)

    restarted = AuditLog(tmp_path, clock=clock, max_file_bytes=250)
    for target in ("c", "d", "e"):
        await restarted.record("user:admin", "model.start", target)

    assert [e.target for e in await restarted.read(date(2025, 3, 1))] == ["a", "b", "c", "d", "e"]
    page = await restarted.page(limit=10)
    assert [e.target for e in page.entries] == ["e", "d", "c", "b", "a"]
    assert page.next is None


async def test_a_log_killed_while_writing_and_rotating_keeps_every_line_it_wrote(tmp_path: Path) -> None:
    # A real crash: a child process writes lines into small rotated files and is killed with SIGKILL.
    script = (
        "import sys, anyio\n"
        "from pathlib import Path\n"
        "from mirbad_orchestration.stores import AuditLog\n"
        "async def main():\n"
        "    log = AuditLog(Path(sys.argv[1]), max_file_bytes=300)\n"
        "    n = 0\n"
        "    while True:\n"
        "        await log.record('user:admin', 'model.start', f'm{n}')\n"
        "        print(n, flush=True)\n"
        "        n += 1\n"
        "anyio.run(main)\n"
    )
    written: list[int] = []
    async with await anyio.open_process([sys.executable, "-c", script, str(tmp_path)]) as child:
        assert child.stdout is not None
        with anyio.fail_after(60):
            buffered = b""
            async for chunk in child.stdout:
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                written += [int(line) for line in lines]
                if len(written) >= 40:
                    break
        child.send_signal(signal.SIGKILL)
        await child.wait()

    log = AuditLog(tmp_path)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await log.page(limit=7, cursor=cursor)
        seen += [e.target for e in page.entries]
        if page.next is None:
            break
        cursor = page.next
    assert len(seen) == len(set(seen))
    assert {f"m{n}" for n in written} <= set(seen)
    assert len(list((tmp_path / AUDIT_FOLDER_NAME).iterdir())) > 1

"""Reading the audit log back: filters, newest first, paged by an opaque cursor across rotated files."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.exceptions import AuditQueryError
from mirbad_orchestration.stores import AuditEntry, AuditLog, AuditQuery, parse_audit_time
from mirbad_orchestration.testing import FakeClock

pytestmark = pytest.mark.anyio

_START = datetime(2025, 3, 1, 23, 58, tzinfo=UTC)


async def _log(tmp_path: Path, count: int = 12) -> AuditLog:
    """``count`` lines a minute apart across midnight, in files rotated every two lines."""
    clock = FakeClock(_START)
    log = AuditLog(tmp_path, clock=clock, max_file_bytes=250)
    for number in range(count):
        actor = "user:admin" if number % 2 == 0 else "key:ci"
        action = "model.start" if number % 3 else "node.enroll"
        target = f"m{number}" if number % 3 else "spark"
        await log.record(actor, action, target, node_id="spark" if number % 4 == 0 else None)
        await clock.advance(timedelta(minutes=1))
    return log


async def _all(log: AuditLog, query: AuditQuery | None = None, limit: int = 5) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    cursor: str | None = None
    while True:
        page = await log.page(query, limit=limit, cursor=cursor)
        entries += page.entries
        if page.next is None:
            return entries
        cursor = page.next


async def test_pages_are_newest_first_and_see_every_line_once(tmp_path: Path) -> None:
    log = await _log(tmp_path)
    first = await log.page(limit=5)
    assert len(first.entries) == 5
    assert first.next is not None
    entries = await _all(log)
    assert [e.at for e in entries] == sorted((e.at for e in entries), reverse=True)
    assert len(entries) == 12
    assert len({e.at for e in entries}) == 12


async def test_lines_written_while_paging_do_not_shift_the_pages(tmp_path: Path) -> None:
    log = await _log(tmp_path)
    first = await log.page(limit=5)
    for number in range(6):  # these rotate the newest file on
        await log.record("user:admin", "model.stop", f"late{number}")
    second = await log.page(limit=5, cursor=first.next)
    assert [e.at for e in second.entries] == [_START + timedelta(minutes=m) for m in (6, 5, 4, 3, 2)]


async def test_filters_by_actor_action_prefix_and_subject(tmp_path: Path) -> None:
    log = await _log(tmp_path)
    assert {e.actor for e in await _all(log, AuditQuery(actor="key:ci"))} == {"key:ci"}
    assert len(await _all(log, AuditQuery(actor="key:ci"))) == 6
    assert {e.action for e in await _all(log, AuditQuery(action="model"))} == {"model.start"}
    assert await _all(log, AuditQuery(action="mod")) == []
    assert {e.action for e in await _all(log, AuditQuery(action="node.enroll"))} == {"node.enroll"}
    # A node's id finds its own entries and those that involved it.
    on_spark = await _all(log, AuditQuery(subject="spark"))
    assert {(e.target, e.node_id) for e in on_spark} >= {("spark", "spark"), ("m4", "spark"), ("spark", None)}
    assert all("spark" in (e.target, e.node_id) for e in on_spark)
    assert [e.target for e in await _all(log, AuditQuery(subject="m5"))] == ["m5"]


async def test_filters_by_time_across_days(tmp_path: Path) -> None:
    log = await _log(tmp_path)
    since = _START + timedelta(minutes=1)
    until = _START + timedelta(minutes=4)
    entries = await _all(log, AuditQuery(since=since, until=until), limit=1)
    assert [e.at for e in entries] == [_START + timedelta(minutes=m) for m in (3, 2, 1)]
    next_day = await _all(log, AuditQuery(since=datetime(2025, 3, 2, tzinfo=UTC)))
    assert len(next_day) == 10


async def test_an_empty_log_has_one_empty_page(tmp_path: Path) -> None:
    page = await AuditLog(tmp_path).page()
    assert page.entries == []
    assert page.next is None


@pytest.mark.parametrize("limit", [0, -1, 501])
async def test_a_limit_out_of_range_is_refused(tmp_path: Path, limit: int) -> None:
    with pytest.raises(AuditQueryError) as refused:
        await AuditLog(tmp_path).page(limit=limit)
    assert refused.value.field == "limit"


@pytest.mark.parametrize("cursor", ["", "nope", "Li4vZXRjL3Bhc3N3ZDow", "MjAyNS0wMy0wMS5qc29ubDox"])
async def test_a_cursor_this_log_did_not_give_out_is_refused(tmp_path: Path, cursor: str) -> None:
    # The last two: "../etc/passwd:0", and "2025-03-01.jsonl:1" (not the start of a line).
    log = await _log(tmp_path)
    with pytest.raises(AuditQueryError) as refused:
        await log.page(cursor=cursor)
    assert refused.value.field == "cursor"


def test_times_are_iso_8601_and_a_bad_one_names_its_field() -> None:
    assert parse_audit_time("since", "2025-03-01T09:30:00Z") == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    assert parse_audit_time("since", "2025-03-01T11:30:00+02:00") == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    assert parse_audit_time("until", "2025-03-01") == datetime(2025, 3, 1, tzinfo=UTC)
    with pytest.raises(AuditQueryError) as refused:
        parse_audit_time("until", "yesterday")
    assert refused.value.field == "until"


def test_a_query_needs_aware_times_in_order() -> None:
    with pytest.raises(AuditQueryError) as naive:
        AuditQuery(since=datetime(2025, 3, 1))
    assert naive.value.field == "since"
    with pytest.raises(AuditQueryError) as backwards:
        AuditQuery(since=datetime(2025, 3, 2, tzinfo=UTC), until=datetime(2025, 3, 1, tzinfo=UTC))
    assert backwards.value.field == "until"


@given(cursor=st.text(max_size=40))
def test_any_cursor_text_is_read_or_refused_naming_the_cursor(
    tmp_path_factory: pytest.TempPathFactory, cursor: str
) -> None:
    log = AuditLog(tmp_path_factory.getbasetemp() / "empty-audit")

    async def read() -> str | None:
        try:
            await log.page(cursor=cursor)
        except AuditQueryError as refused:
            return refused.field
        return None

    assert anyio.run(read) in (None, "cursor")

"""The typed client's audit call, both twins, against a real master served on loopback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.client.test_client import connected

from mirbad_client import AdminApiError

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_audit_pages_filters_and_refusals(tmp_path: Path, kind: str) -> None:
    async with connected(tmp_path, kind) as (master, admin, _url):
        for number in range(3):
            await master.services.audit.record("user:admin", "model.start", f"m{number}", node_id="local")
        await master.services.audit.record("key:ci", "key.revoke", "k1")
        first = await admin("audit", subject="local", limit=2)
        second = await admin("audit", subject="local", limit=2, cursor=first.next)
        recent = await admin("audit", action="key", since=datetime.now(UTC) - timedelta(minutes=5))
        with pytest.raises(AdminApiError) as bad:
            await admin("audit", since="last week")

    assert [e.target for e in first.entries] == ["m2", "m1"]
    assert ([e.target for e in second.entries], second.next) == (["m0"], None)
    assert [(e.actor, e.target) for e in recent.entries] == [("key:ci", "k1")]
    assert (bad.value.status_code, bad.value.code, bad.value.field) == (422, "invalid_audit_query", "since")

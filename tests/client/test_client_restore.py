"""The typed client's restore calls, both twins, against a real master served on loopback."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tests._support.asgi_server import serve_asgi
from tests.client.test_client import client_of
from tests.master._stack import running_master
from tests.master.test_restore_room import PASSPHRASE, RAW, agent_with_folders

from mirbad_client import AdminApiError
from mirbad_master._app import create_master_app

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_restore_calls(tmp_path: Path, kind: str) -> None:
    async with (
        running_master(tmp_path, agent=agent_with_folders) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        preview = await admin("preview_restore", RAW, passphrase=PASSPHRASE)
        with pytest.raises(AdminApiError) as wrong:
            await admin("preview_restore", RAW, passphrase="a wrong passphrase")
        with pytest.raises(AdminApiError) as none_yet:
            await admin("restore_job")
        job = await admin("restore", RAW, passphrase=PASSPHRASE)
        with anyio.fail_after(10):
            while not master.agents.agents["local"].downloads:  # noqa: ASYNC110 - the fake agent signals nothing
                await anyio.sleep(0.02)
        shown = await admin("restore_job")
        cancelled = await admin("cancel_restore")

    assert [model.id for model in preview.models] == ["kept", "qwen"]
    assert [key.id for key in preview.new_api_keys] == ["k1aaaaaa"]
    assert (wrong.value.status_code, wrong.value.code) == (422, "invalid_backup")
    assert (none_yet.value.status_code, none_yet.value.code) == (404, "job_not_found")
    assert (job.state, shown.id, cancelled.id) == ("running", job.id, job.id)
    assert shown.keys_added == ["k1aaaaaa"]
    assert cancelled.state == "cancelled"

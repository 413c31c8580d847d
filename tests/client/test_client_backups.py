"""The typed client's backup calls, both twins, against a real master served on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._support.asgi_server import serve_asgi
from tests.client.test_client import client_of
from tests.master._stack import running_master

from mirbad_client import AdminApiError
from mirbad_master._app import create_master_app
from mirbad_orchestration.backups import open_secrets, parse_backup

pytestmark = pytest.mark.anyio

PASSPHRASE = "correct horse battery"


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


async def test_backup_calls(tmp_path: Path, kind: str) -> None:
    directory = tmp_path / "backups"
    directory.mkdir()
    async with (
        running_master(tmp_path / "master", backup_dir=directory) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
        client_of(kind, url, master.password) as admin,
    ):
        encrypted = await admin("back_up_now", PASSPHRASE)
        plain = await admin("back_up_now")
        listed = await admin("backups")
        copy = await admin("download_backup", encrypted.name)
        with pytest.raises(AdminApiError) as short:
            await admin("back_up_now", "too short")
        with pytest.raises(AdminApiError) as missing:
            await admin("download_backup", "mirbad-backup-elsewhere-20260101T000000Z.json")
        with pytest.raises(AdminApiError) as path:
            await admin("download_backup", "../secret.json")  # no route takes a separator

    assert (encrypted.encrypted, plain.encrypted) == (True, False)
    assert [backup.name for backup in listed.backups][:2] == [plain.name, encrypted.name]
    assert listed.schedule.enabled
    assert listed.last_backup == plain
    assert copy == (directory / encrypted.name).read_bytes()
    assert open_secrets(parse_backup(copy), PASSPHRASE).ca is not None
    assert (short.value.status_code, short.value.code, short.value.field) == (
        422,
        "passphrase_too_short",
        "passphrase",
    )
    assert (missing.value.status_code, missing.value.code) == (404, "backup_not_found")
    assert path.value.status_code == 404

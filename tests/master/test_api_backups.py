"""``/api/backup`` on a real master served on loopback: what a backup holds, and what is never served.

The property: whatever name is asked for under ``/api/backup/files/`` (a path, a dot-dot, an encoded
separator, a symlink or a FIFO that carries a backup's name), the answer is a 404 or the bytes of a
backup that is really in the directory; never a byte of a file outside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import anyio.to_thread
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests._support.asgi_server import serve_asgi
from tests.master._stack import running_master

from mirbad_master._app import create_master_app
from mirbad_orchestration.backups import FleetCaBackup, open_secrets, parse_backup
from mirbad_orchestration.services import WhitelistedContainer
from mirbad_protocol.admin import ApiKeyCreate

pytestmark = pytest.mark.anyio

PASSPHRASE = "correct horse battery"
SECRET = b'{"schemaVersion": 2, "outside": "never served"}\n'
TRAP = "mirbad-backup-trap-20260101T000000Z.json"
PIPE = "mirbad-backup-pipe-20260101T000000Z.json"


def lay_traps(tmp_path: Path) -> Path:
    """A backup directory beside a secret file, holding a symlink and a FIFO with backups' names."""
    directory = tmp_path / "backups"
    directory.mkdir(parents=True)
    (tmp_path / "secret.json").write_bytes(SECRET)
    (directory / TRAP).symlink_to(tmp_path / "secret.json")
    os.mkfifo(directory / PIPE)
    return directory


@contextmanager
def client(url: str, password: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {password}"}, timeout=10) as http:
        yield http


NAME_PIECES = st.sampled_from(
    ["..", "/", "%2F", "%2e%2e", "\\", "mirbad-backup-", "trap", "pipe", "secret.json", TRAP, PIPE, "."]
)
NAMES = st.one_of(
    st.lists(NAME_PIECES, min_size=1, max_size=6).map("".join),
    st.text(min_size=1, max_size=40),
    st.just("../secret.json"),
    st.just("..%2Fsecret.json"),
)


async def test_no_name_serves_a_file_outside_the_directory(tmp_path: Path) -> None:
    directory = lay_traps(tmp_path)
    async with (
        running_master(tmp_path / "master", backup_dir=directory) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
    ):
        written = (await master.admin.post("/api/backup")).json()["name"]
        inside = {
            path.name: path.read_bytes()
            for path in directory.iterdir()
            if path.is_file() and not path.is_symlink()
        }
        assert written in inside

        def explore() -> None:
            with client(url, master.password) as http:

                @given(name=NAMES, encode=st.booleans())
                @settings(
                    max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck)
                )
                def asked(name: str, encode: bool) -> None:
                    # Raw: separators and escapes go as typed (only what no URL may hold is encoded).
                    path = quote(name, safe="") if encode else quote(name, safe="/%\\")
                    answer = http.get(f"/api/backup/files/{path}")
                    assert b"never served" not in answer.content
                    served = answer.headers.get("content-disposition")
                    if served is not None:
                        # A file was served: it must be a regular file in the directory, byte for byte.
                        name = served.removeprefix('attachment; filename="').removesuffix('"')
                        assert not (directory / name).is_symlink()
                        assert answer.content == (directory / name).read_bytes()
                    else:
                        # Not a file: a refusal, or a dot-dot the client resolved to another route.
                        assert answer.status_code in (200, 400, 404, 405), answer.text

                asked()
                for name in (TRAP, PIPE, "../secret.json", f"..%2F{written}"):
                    assert http.get(f"/api/backup/files/{name}").status_code == 404
                assert http.get(f"/api/backup/files/{written}").content == (directory / written).read_bytes()

        await anyio.to_thread.run_sync(explore)


async def test_a_token_downloads_once_and_needs_no_bearer(tmp_path: Path) -> None:
    directory = lay_traps(tmp_path)
    async with running_master(tmp_path / "master", backup_dir=directory) as master:
        written = (await master.admin.post("/api/backup", json={"passphrase": PASSPHRASE})).json()
        for name in (TRAP, PIPE, "secret.json"):
            refused = await master.admin.post("/api/backup/download-tokens", json={"name": name})
            assert refused.status_code == 404
        bad = await master.admin.post("/api/backup/download-tokens", json={"nmae": written["name"]})
        issued = (
            await master.admin.post("/api/backup/download-tokens", json={"name": written["name"]})
        ).json()
        first = await master.anonymous.get(f"/api/backup/download/{issued['token']}")
        again = await master.anonymous.get(f"/api/backup/download/{issued['token']}")
        unsigned = await master.anonymous.post("/api/backup/download-tokens", json={"name": written["name"]})

    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "nmae")
    assert first.status_code == 200
    assert first.headers["content-disposition"] == f'attachment; filename="{written["name"]}"'
    assert first.content == (directory / written["name"]).read_bytes()
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "backup_not_found"
    assert unsigned.status_code == 401


async def test_a_backup_holds_the_fleet_and_with_a_passphrase_its_secrets(tmp_path: Path) -> None:
    directory = tmp_path / "backups"
    directory.mkdir()
    async with running_master(tmp_path / "master", "local", "gpu-1", backup_dir=directory) as master:
        services = master.services
        await services.keys.create(ApiKeyCreate(name="notebook"))
        container = WhitelistedContainer(node="gpu-1", name="open-webui", container_id="c0ffee")
        await services.host_services_store.update(
            lambda document: document.model_copy(update={"containers": [container]})
        )
        identity = await services.identity.read()
        written = (await master.admin.post("/api/backup", json={"passphrase": PASSPHRASE})).json()
        plain = (await master.admin.post("/api/backup")).json()
        models = await services.models.list()
        nodes = await services.nodes.list()
        records = await services.keys.export_records()

    backup = parse_backup((directory / written["name"]).read_bytes())
    document = backup.document
    assert document.schema_version == 2
    assert document.master == identity
    assert document.models == models
    assert document.nodes == nodes
    assert document.host_services.master.containers == [container]
    assert document.host_services.nodes == {"gpu-1": document.host_services.master}
    secrets = open_secrets(backup, PASSPHRASE)
    assert secrets.api_keys == records
    assert secrets.ca == FleetCaBackup.of(services.authority)
    assert secrets.share_password is None
    unencrypted = json.loads((directory / plain["name"]).read_bytes())
    assert "secrets" not in unencrypted
    assert "PRIVATE KEY" not in (directory / plain["name"]).read_text()


async def test_the_ca_stays_out_when_the_setting_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "backups"
    directory.mkdir()
    async with running_master(tmp_path / "master", backup_dir=directory, backup_include_ca=False) as master:
        await master.services.keys.create(ApiKeyCreate(name="notebook"))
        written = (await master.admin.post("/api/backup", json={"passphrase": PASSPHRASE})).json()
        listed = (await master.admin.get("/api/backup")).json()

    secrets = open_secrets(parse_backup((directory / written["name"]).read_bytes()), PASSPHRASE)
    assert secrets.ca is None
    assert len(secrets.api_keys) == 1
    assert listed["schedule"]["includeCa"] is False

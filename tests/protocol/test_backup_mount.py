"""The backup share's request rules: each field's character set, the password, and the wire payloads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.hostd import (
    BackupMountRemoved,
    BackupMountStatus,
    BackupShare,
    BackupShareProbe,
    check_share_domain,
    check_share_password,
    check_share_path,
    check_share_server,
    check_share_user,
)

CIFS: dict[str, Any] = {
    "kind": "cifs",
    "server": "nas.local",
    "share": "backups/mirbad",
    "username": "backup",
    "password": "s3cret, with = and % and 'quotes'",
    "domain": "WORKGROUP",
    "version": "3.1.1",
}
NFS: dict[str, Any] = {"kind": "nfs", "server": "10.0.0.5", "share": "/export/backups", "version": "4.2"}

# What no field but the password may hold: option and key separators, a systemd specifier, quotes,
# line breaks, and a climb out of the share.
FORBIDDEN = [",", "=", "%", '"', "'", "\n", "\r", "..", " ", "\\", ";", "$", "`", "\t", "\x00"]
TEXT_CHECKS = [check_share_server, check_share_path, check_share_user, check_share_domain]


def _refused(body: dict[str, Any]) -> InvalidFieldError:
    with pytest.raises(InvalidFieldError) as caught:
        BackupShare.from_user_json(json.dumps(body))
    return caught.value


def test_a_cifs_and_an_nfs_share_are_accepted() -> None:
    cifs = BackupShare.from_user_json(json.dumps(CIFS))
    nfs = BackupShare.from_user_json(json.dumps(NFS))
    assert (cifs.kind, cifs.share, cifs.password) == ("cifs", "backups/mirbad", CIFS["password"])
    assert (nfs.kind, nfs.share, nfs.password) == ("nfs", "/export/backups", None)


@pytest.mark.parametrize("field", ["server", "share", "username", "domain"])
@pytest.mark.parametrize("bad", FORBIDDEN)
def test_a_forbidden_character_in_a_field_is_refused_naming_it(field: str, bad: str) -> None:
    body = CIFS | {field: f"ab{bad}cd"}
    error = _refused(body)
    assert error.field == field


@given(text=st.text(min_size=1, max_size=40), check=st.sampled_from(TEXT_CHECKS))
def test_no_accepted_text_holds_a_forbidden_character(text: str, check: Any) -> None:
    try:
        accepted = check(text)
    except ValueError:
        return
    assert not any(bad in accepted for bad in FORBIDDEN), accepted
    assert accepted.isascii()
    assert not accepted.startswith("-")  # never read as an option by mount


@given(password=st.text(min_size=1, max_size=256))
def test_a_password_is_accepted_exactly_when_printable(password: str) -> None:
    if password.isprintable():
        assert check_share_password(password) == password
    else:
        with pytest.raises(ValueError, match="printable") as caught:
            check_share_password(password)
        assert password not in str(caught.value)


@pytest.mark.parametrize("password", ["line\nbreak", "tab\there", "bell\x07", "", "x" * 257])
def test_a_bad_password_is_refused_without_repeating_it(password: str) -> None:
    error = _refused(CIFS | {"password": password})
    assert error.field == "password"
    if password:
        assert password not in str(error)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (CIFS | {"kind": "smb"}, "kind"),
        (CIFS | {"share": "/backups"}, "share"),
        (NFS | {"share": "export/backups"}, "share"),
        (NFS | {"username": "backup"}, "username"),
        (NFS | {"password": "x"}, "password"),
        (CIFS | {"version": "4.2"}, "version"),
        (NFS | {"version": "3.1.1"}, "version"),
        ({k: v for k, v in CIFS.items() if k != "username"}, "username"),
        ({k: v for k, v in CIFS.items() if k != "password"}, "password"),
        (CIFS | {"target": "/etc"}, "target"),
        (CIFS | {"server": "-oremount"}, "server"),
        (CIFS | {"share": "a/../b"}, "share"),
        (CIFS | {"server": "n" * 300}, "server"),
    ],
)
def test_a_bad_share_is_refused_naming_the_field(body: dict[str, Any], field: str) -> None:
    assert _refused(body).field == field


def test_the_password_is_neither_in_repr_nor_in_the_stored_settings() -> None:
    share = BackupShare.from_user_json(json.dumps(CIFS))
    assert CIFS["password"] not in repr(share)
    assert CIFS["password"] not in str(share)
    assert "password" not in share.without_secret().to_wire()


def test_wire_payloads(snapshot_json: SnapshotAssertion) -> None:
    share = BackupShare.from_user_json(json.dumps(CIFS)).without_secret()
    payloads = [
        share.to_wire(),
        BackupMountStatus(
            target="/srv/mirbad/backups",
            unit="srv-mirbad-backups.mount",
            configured=True,
            share=share,
            mounted=True,
            fs_type="cifs",
            source="//nas.local/backups/mirbad",
            network=True,
            free_bytes=1 << 40,
            total_bytes=4 << 40,
        ).to_wire(),
        BackupShareProbe(source="nas.local:/export", fs_type="nfs", uid=10001, gid=10001).to_wire(),
        BackupMountRemoved(unit="srv-mirbad-backups.mount", warnings=["owned by 0:0"]).to_wire(),
    ]
    assert payloads == snapshot_json

"""The master's identity: made once, kept across restarts, fail closed, and raised by recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirbad_orchestration.exceptions import StateFileError
from mirbad_orchestration.fleet import MASTER_IDENTITY_FILE, MasterIdentity, MasterIdentityStore

pytestmark = pytest.mark.anyio


async def test_the_identity_is_made_once_and_kept_across_restarts(tmp_path: Path) -> None:
    first = await MasterIdentityStore(tmp_path).read()
    again = await MasterIdentityStore(tmp_path).read()

    assert first == again
    assert first.epoch == 0
    assert first.instance_id.startswith("m-")
    assert json.loads((tmp_path / MASTER_IDENTITY_FILE).read_text()) == {
        "instanceId": first.instance_id,
        "epoch": 0,
    }


async def test_two_masters_get_two_identities(tmp_path: Path) -> None:
    one = await MasterIdentityStore(tmp_path / "a").read()
    other = await MasterIdentityStore(tmp_path / "b").read()

    assert one.instance_id != other.instance_id


async def test_recovery_takes_the_backups_identity_one_epoch_above_it(tmp_path: Path) -> None:
    store = MasterIdentityStore(tmp_path)
    await store.read()

    recovered = await store.recover(MasterIdentity(instance_id="m-lost", epoch=4))

    assert recovered == MasterIdentity(instance_id="m-lost", epoch=5)
    assert await MasterIdentityStore(tmp_path).read() == recovered


async def test_a_bump_raises_the_epoch_and_keeps_the_id(tmp_path: Path) -> None:
    store = MasterIdentityStore(tmp_path)
    made = await store.read()

    assert await store.bump_epoch() == MasterIdentity(instance_id=made.instance_id, epoch=1)
    assert (await MasterIdentityStore(tmp_path).read()).epoch == 1


async def test_an_unreadable_identity_fails_closed_and_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / MASTER_IDENTITY_FILE
    path.write_text('{"instanceId": "", "epoch": -1}')

    for _ in range(2):
        with pytest.raises(StateFileError, match="not a master identity"):
            await MasterIdentityStore(tmp_path).read()
    assert path.read_text() == '{"instanceId": "", "epoch": -1}'

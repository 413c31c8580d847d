"""Who the master is to its fleet: an instance id made once, and a fencing epoch that only goes up.

The identity is made at the master's first start and kept in ``master-identity.json`` in the data
directory. It fails closed: a file that cannot be read is an error on every call, never replaced by a
new identity, because a master that forgot who it was would look like a stranger to its own fleet.
Fleet recovery (``mirbad up --recover``) puts back the identity of the master a backup came from, with
its epoch raised by one, so the agents keep trusting the master while any older master (the lost one,
should it come back) is below the fence.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Final

from pydantic import Field, ValidationError

from mirbad_orchestration.exceptions import StateFileError
from mirbad_orchestration.stores import StateFile
from mirbad_protocol import WireModel

__all__ = ["MASTER_IDENTITY_FILE", "MasterIdentity", "MasterIdentityStore"]

MASTER_IDENTITY_FILE: Final = "master-identity.json"
"""The identity's file in the master's data directory."""


class MasterIdentity(WireModel):
    """Who the master is to its fleet.

    Attributes:
        instance_id: made once at the master's first start; fleet recovery keeps it.
        epoch: the fencing epoch; a recovered master continues above the backup's.
    """

    instance_id: Annotated[str, Field(min_length=1, max_length=200)]
    epoch: Annotated[int, Field(ge=0)]


def _decode(path: Path, raw: bytes) -> MasterIdentity | None:
    try:
        return MasterIdentity.model_validate_json(raw)
    except ValidationError as exc:
        raise StateFileError(path, f"not a master identity: {exc.errors()[0]['msg']}") from None


def _encode(identity: MasterIdentity | None) -> object:
    assert identity is not None  # seeded at the first read: never written empty
    return identity.to_wire()


class MasterIdentityStore:
    """The master's identity in ``data_dir`` (see the module).

    Args:
        data_dir: the master's data directory.
    """

    def __init__(self, data_dir: Path) -> None:
        self._file: StateFile[MasterIdentity | None] = StateFile(
            data_dir / MASTER_IDENTITY_FILE,
            None,
            decode=_decode,
            encode=_encode,
            seed=lambda: MasterIdentity(instance_id=f"m-{uuid.uuid4().hex}", epoch=0),
        )

    @property
    def path(self) -> Path:
        """The identity's file."""
        return self._file.path

    async def read(self) -> MasterIdentity:
        """The identity, made (epoch 0) and stored at the first call.

        Raises:
            StateFileError: the file cannot be read or is not an identity (it is left as it is).
        """
        identity = await self._file.read()
        assert identity is not None  # seeded
        return identity

    async def recover(self, identity: MasterIdentity) -> MasterIdentity:
        """Become the master ``identity`` names, one epoch above it (fleet recovery); return it as stored."""
        recovered = MasterIdentity(instance_id=identity.instance_id, epoch=identity.epoch + 1)
        return self._checked(await self._file.update(lambda _current: recovered))

    async def bump_epoch(self) -> MasterIdentity:
        """Raise the epoch by one (a takeover fences the master before it); return the identity as stored."""

        def bumped(current: MasterIdentity | None) -> MasterIdentity:
            assert current is not None  # seeded
            return MasterIdentity(instance_id=current.instance_id, epoch=current.epoch + 1)

        return self._checked(await self._file.update(bumped))

    @staticmethod
    def _checked(identity: MasterIdentity | None) -> MasterIdentity:
        assert identity is not None
        return identity

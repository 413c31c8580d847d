"""The room's state per running master: the sealed share store and the lock of its changes.

The state belongs to one :class:`~mirbad_master._composition.MasterServices` (a test runs several
masters in one process), so it is kept beside it, made on first use, and goes with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

import anyio

from mirbad_master._composition import MasterServices

from ._sealed_share import SealedShareStore

__all__ = ["ShareKeeper", "keeper_of"]


@dataclass
class ShareKeeper:
    """The sealed store and the lock that keeps hostd's share and the master's record in step.

    Attributes:
        store: the share's record and sealed password.
        lock: held over an apply or a disconnect, so the record always describes the last change
            that hostd accepted.
    """

    store: SealedShareStore
    lock: anyio.Lock = field(default_factory=anyio.Lock)


_KEEPERS: WeakKeyDictionary[MasterServices, ShareKeeper] = WeakKeyDictionary()


def keeper_of(services: MasterServices) -> ShareKeeper:
    """``services``' keeper, made on first use."""
    keeper = _KEEPERS.get(services)
    if keeper is None:
        keeper = _KEEPERS[services] = ShareKeeper(SealedShareStore(services.settings.data_dir))
    return keeper

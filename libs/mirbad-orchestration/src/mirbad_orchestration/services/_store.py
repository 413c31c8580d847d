"""``{data}/host-services.json``: the master's container whitelist and the remembered restart policies.

Seeded once (from the configured containers, none by default); after that the file is the truth, and a
corrupt one fails closed: every container action is refused until someone fixes it, rather than the
master re-seeding a whitelist nobody chose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from pydantic import Field

from mirbad_orchestration.exceptions import HostServicesFileError
from mirbad_orchestration.stores import StateFile
from mirbad_protocol import InvalidFieldError, WireModel
from mirbad_protocol.agent import RestartPolicy

__all__ = [
    "HOST_SERVICES_FILE_NAME",
    "HostServicesDocument",
    "HostServicesStore",
    "WhitelistedContainer",
    "policy_key",
]

HOST_SERVICES_FILE_NAME: Final = "host-services.json"
"""The file in the master's data directory."""


class WhitelistedContainer(WireModel):
    """One container the Services page may act on.

    Attributes:
        node: the node it runs on.
        name: its Docker name.
        display_name: what the page shows (its name when empty).
        protected: stop, restart and autostart-off need its name typed.
        container_id: the id of the container that was whitelisted. A name can be reused by any
            account that may run containers, so the entry binds the container, not the name: a
            replacement of the same name is not whitelisted. Empty for a seeded entry until its
            first action binds the container that then holds the name.
    """

    node: str
    name: str
    display_name: str = ""
    protected: bool = False
    container_id: str = ""


class HostServicesDocument(WireModel):
    """The file: the whitelist and, per ``node/name``, the policy autostart-on restores."""

    containers: list[WhitelistedContainer] = Field(default_factory=list)
    restart_policies: dict[str, RestartPolicy] = Field(default_factory=dict)

    def find(self, node: str, name: str) -> WhitelistedContainer | None:
        """The whitelist entry of ``name`` on ``node``, if any."""
        return next((c for c in self.containers if c.node == node and c.name == name), None)


_Change = Callable[[HostServicesDocument], HostServicesDocument]


def policy_key(node: str, name: str) -> str:
    """The key of a container's remembered policy."""
    return f"{node}/{name}"


class HostServicesStore:
    """The file behind one lock, replaced atomically on every change.

    Args:
        data_dir: the master's data directory.
        seed: the containers the first start writes (``ManagedContainers``); none by default.
    """

    def __init__(self, data_dir: Path, seed: Sequence[WhitelistedContainer] = ()) -> None:
        seeded = HostServicesDocument(containers=list(seed))
        self._file: StateFile[HostServicesDocument] = StateFile(
            data_dir / HOST_SERVICES_FILE_NAME,
            HostServicesDocument(),
            decode=_decode,
            seed=lambda: seeded,
            failure=lambda path, action, detail, full: HostServicesFileError(
                path, f"cannot {action} it: {detail}", disk_full=full
            ),
        )

    @property
    def path(self) -> Path:
        """The file."""
        return self._file.path

    async def read(self) -> HostServicesDocument:
        """The document (seeded at the first read when the file is missing).

        Raises:
            HostServicesFileError: the file is unreadable or invalid (it is never overwritten).
        """
        return await self._file.read()

    async def update(self, change: _Change) -> HostServicesDocument:
        """Apply ``change`` under the lock and write the result."""
        return await self._file.update(change)


def _decode(path: Path, raw: bytes) -> HostServicesDocument:
    try:
        return HostServicesDocument.from_wire_json(raw)
    except InvalidFieldError as exc:
        # Fail closed: a corrupt whitelist must not turn into the seed, nor into an empty one.
        raise HostServicesFileError(path, f"invalid ({exc}); fix or remove it") from None

"""systemctl by argv, never through a shell, each call bounded; output parsed from systemd 252's formats.

A user manager is reached as root with ``--user --machine=USER@``. Every action passes ``--no-block``
(systemd queues the job and the Services page polls the status), and :meth:`Systemctl.act` checks
the deny list itself, so no path above it (a bug in a route, a whitelist file edited by hand) can make
hostd touch a denied unit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import anyio

from mirbad_protocol.hostd import HostdAction, ServiceScope

from ._deny import DenyList
from .exceptions import ActionFailedError, SystemctlError

__all__ = ["SHOW_PROPERTIES", "Manager", "Systemctl", "parse_show", "parse_table_json"]

logger = logging.getLogger(__name__)

SHOW_PROPERTIES: Final[tuple[str, ...]] = (
    "Id",
    "Description",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "FragmentPath",
    "MemoryCurrent",
    "ControlGroup",
    "ActiveEnterTimestamp",
)
"""What one batched ``systemctl show`` reads per unit."""

_SHOWN_ERROR: Final = 500


@dataclass(frozen=True)
class Manager:
    """A systemd manager: the system's (PID 1) or one user's.

    Attributes:
        scope: ``system`` or ``user``.
        user: the user of a user manager.
    """

    scope: ServiceScope = "system"
    user: str | None = None

    @property
    def argv(self) -> list[str]:
        """The systemctl options that select this manager."""
        return ["--system"] if self.scope == "system" else ["--user", f"--machine={self.user}@"]


def parse_table_json(text: str) -> list[dict[str, str]]:
    """Parse ``systemctl list-units -o json`` or ``list-unit-files -o json``: a JSON array of objects.

    Values that are not strings (none in systemd 252's tables) are dropped; a cell systemd leaves
    empty is ``null`` there and is dropped too.

    Raises:
        SystemctlError: not a JSON array of objects.
    """
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise SystemctlError(f"systemctl printed no JSON table: {exc}") from None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise SystemctlError("systemctl printed JSON that is not a table")
    return [{key: value for key, value in row.items() if isinstance(value, str)} for row in rows]


def parse_show(text: str) -> list[dict[str, str]]:
    """Parse ``systemctl show``: ``Key=Value`` lines, one block per unit, blocks split by a blank line."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, separator, value = line.partition("=")
        if separator:
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


class Systemctl:
    """Runs the systemctl executable.

    Args:
        executable: the systemctl path or command name (a stand-in in tests).
        deny: the deny list :meth:`act` checks again.
        query_timeout_s: the bound of one listing or show call.
        action_timeout_s: the bound of one action.
    """

    def __init__(
        self, executable: str, deny: DenyList, *, query_timeout_s: float, action_timeout_s: float
    ) -> None:
        self._executable = executable
        self._deny = deny
        self._query_timeout_s = query_timeout_s
        self._action_timeout_s = action_timeout_s

    async def list_units(self, manager: Manager) -> list[dict[str, str]]:
        """Every loaded service unit of ``manager``, active or not."""
        argv = [*manager.argv, "list-units", "--type=service", "--all", "-o", "json", "--no-pager"]
        return parse_table_json(await self._query(argv))

    async def list_unit_files(self, manager: Manager) -> list[dict[str, str]]:
        """Every service unit file of ``manager``, with its enablement state."""
        argv = [*manager.argv, "list-unit-files", "--type=service", "-o", "json", "--no-pager"]
        return parse_table_json(await self._query(argv))

    async def show(self, manager: Manager, units: Sequence[str]) -> dict[str, dict[str, str]]:
        """:data:`SHOW_PROPERTIES` of ``units``, keyed by the name asked for.

        systemd prints one block per unit in the order asked; an alias answers with its target's
        ``Id``, so blocks are matched by position and the ``Id`` is kept for the caller to compare.
        """
        if not units:
            return {}
        argv = [
            *manager.argv,
            "show",
            "-p",
            ",".join(SHOW_PROPERTIES),
            "--timestamp=unix",
            "--no-pager",
            "--",
            *units,
        ]
        blocks = parse_show(await self._query(argv))
        if len(blocks) != len(units):
            raise SystemctlError(f"systemctl show answered {len(blocks)} blocks for {len(units)} units")
        return dict(zip(units, blocks, strict=True))

    async def act(self, manager: Manager, unit: str, action: HostdAction) -> None:
        """Queue ``action`` for ``unit`` (``--no-block``); the deny list is checked here once more.

        Raises:
            UnitDeniedError: the unit is denied (nothing runs).
            ActionFailedError: systemctl refused, failed or did not answer in time.
        """
        self._deny.check(unit)
        argv = [*manager.argv, "--no-block", action, "--", unit]
        try:
            await self._run(argv, self._action_timeout_s)
        except SystemctlError as exc:
            raise ActionFailedError(str(exc)) from None

    async def manage_own(self, *argv: str) -> None:
        """Run a system-manager command on hostd's own unit (the backup share's mount), or a reload.

        Not for whitelisted services: the unit is the one hostd writes itself at a fixed target, so no
        request can name another; the call blocks until systemd has done the job, within the action
        bound, so a mount that fails is an error here.

        Raises:
            ActionFailedError: systemctl failed or did not answer in time.
        """
        try:
            await self._run(["--system", *argv], self._action_timeout_s)
        except SystemctlError as exc:
            raise ActionFailedError(str(exc)) from None

    async def _query(self, argv: list[str]) -> str:
        return await self._run(argv, self._query_timeout_s)

    async def _run(self, argv: list[str], timeout_s: float) -> str:
        command = [self._executable, *argv]
        try:
            with anyio.fail_after(timeout_s):
                result = await anyio.run_process(command, check=False)
        except TimeoutError:
            raise SystemctlError(f"systemctl {argv[-1]} did not answer within {timeout_s:g} s") from None
        except OSError as exc:
            raise SystemctlError(f"systemctl could not be run: {exc}") from None
        if result.returncode != 0:
            stderr = result.stderr.decode(errors="replace").strip()[:_SHOWN_ERROR]
            raise SystemctlError(f"systemctl exited with {result.returncode}: {stderr or 'no message'}")
        return result.stdout.decode(errors="replace")

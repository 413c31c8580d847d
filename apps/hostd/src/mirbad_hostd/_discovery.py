"""Discovery: every service unit of the system manager and of each discoverUsers user's manager.

``list-units --all`` and ``list-unit-files`` are merged; templates without an instance
(``foo@.service``), aliases, masked, transient and not-found units are skipped; the rest are read with
batched ``systemctl show`` calls, and a unit that is loaded without a unit file (no FragmentPath) is
dropped, because it has nothing systemctl could enable, disable or restart by name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ._systemctl import Manager, Systemctl

__all__ = ["UnitState", "discover_units", "read_states", "unit_state"]

_TEMPLATE: Final = re.compile(r"[^@]+@\.service")
_SKIPPED_FILE_STATES: Final = frozenset({"alias", "masked", "masked-runtime", "transient", "generated-alias"})
_SKIPPED_LOAD_STATES: Final = frozenset({"not-found", "masked"})
_UNSET_MEMORY: Final = 2**64 - 1


@dataclass(frozen=True)
class UnitState:
    """One unit as ``systemctl show`` reported it."""

    unit: str
    manager: Manager
    id: str = ""
    description: str = ""
    load_state: str = ""
    active_state: str = ""
    sub_state: str = ""
    unit_file_state: str = ""
    fragment_path: str = ""
    memory_bytes: int | None = None
    control_group: str = ""
    active_since: int | None = None


def unit_state(unit: str, manager: Manager, properties: dict[str, str]) -> UnitState:
    """Read one ``show`` block (``MemoryCurrent=[not set]`` and empty timestamps read as None)."""
    return UnitState(
        unit=unit,
        manager=manager,
        id=properties.get("Id", ""),
        description=properties.get("Description", ""),
        load_state=properties.get("LoadState", ""),
        active_state=properties.get("ActiveState", ""),
        sub_state=properties.get("SubState", ""),
        unit_file_state=properties.get("UnitFileState", ""),
        fragment_path=properties.get("FragmentPath", ""),
        memory_bytes=_memory(properties.get("MemoryCurrent", "")),
        control_group=properties.get("ControlGroup", ""),
        active_since=_timestamp(properties.get("ActiveEnterTimestamp", "")),
    )


def _memory(value: str) -> int | None:
    if not value.isascii() or not value.isdigit():
        return None  # "[not set]": memory accounting is off for the unit
    number = int(value)
    return None if number >= _UNSET_MEMORY else number


def _timestamp(value: str) -> int | None:
    # --timestamp=unix prints "@1700000000"; a unit that never became active has an empty value.
    digits = value.removeprefix("@")
    return int(digits) if value.startswith("@") and digits.isascii() and digits.isdigit() else None


async def read_states(
    systemctl: Systemctl, manager: Manager, units: Sequence[str], *, batch: int
) -> list[UnitState]:
    """``show`` ``units`` in batches of ``batch``; each block read by :func:`unit_state`."""
    states: list[UnitState] = []
    for start in range(0, len(units), batch):
        shown = await systemctl.show(manager, units[start : start + batch])
        states.extend(unit_state(unit, manager, properties) for unit, properties in shown.items())
    return states


async def discover_units(systemctl: Systemctl, manager: Manager, *, batch: int) -> list[UnitState]:
    """Every manageable service unit of ``manager`` (see the module docstring for what is skipped).

    Raises:
        SystemctlError: a listing or a show call failed.
    """
    loaded = {row["unit"]: row for row in await systemctl.list_units(manager) if "unit" in row}
    files = {row["unit_file"]: row for row in await systemctl.list_unit_files(manager) if "unit_file" in row}
    candidates = [
        unit
        for unit in sorted(set(loaded) | set(files))
        if unit.endswith(".service")
        and not _TEMPLATE.fullmatch(unit)
        and files.get(unit, {}).get("state") not in _SKIPPED_FILE_STATES
        and loaded.get(unit, {}).get("load") not in _SKIPPED_LOAD_STATES
    ]
    states = await read_states(systemctl, manager, candidates, batch=batch)
    return [state for state in states if _manageable(state)]


def _manageable(state: UnitState) -> bool:
    return (
        bool(state.fragment_path)
        and state.load_state not in _SKIPPED_LOAD_STATES
        and state.unit_file_state not in _SKIPPED_FILE_STATES
        # An alias shown under its own name answers with its target's Id.
        and state.id in {"", state.unit}
    )

#!/usr/bin/env python3
"""A stand-in ``systemctl`` (stdlib only) that replays systemd 252's output formats from a JSON fixture.

Where the formats come from: systemd's ``src/systemctl/systemctl-list-units.c`` and
``systemctl-list-unit-files.c`` build their tables with the columns ``unit, load, active, sub, job,
description`` and ``unit file, state, preset``; ``-o json`` prints each table as one JSON array of
objects keyed by the lowercased column header, spaces as ``_`` (``unit_file``), an empty job column
hidden. ``systemctl show`` prints ``Key=Value`` lines per unit, a blank line between units; with
``--timestamp=unix`` a timestamp reads ``@<seconds>``, an unset one is empty, and an unset
``MemoryCurrent`` reads ``[not set]`` (``man systemctl``, systemd 252). Service properties come
before the unit ones, as the real tool lists the Service interface first.

The fixture (``MIRBAD_FAKE_SYSTEMCTL_STATE``) is ``{"managers": {"system": [unit, ...],
"user:alice": [...]}, "failing": ["user:bob"], "failing_actions": ["x.service"], "hanging":
["start"]}`` where a unit is ``{"unit", "load", "active", "sub", "description", "file_state",
"preset", "fragment", "memory", "cgroup", "active_enter", "listed", "alias_of"}``; actions change it
the way systemd would, so a later ``show`` sees the new state. Every call's argv is appended as one
JSON line to
``MIRBAD_FAKE_SYSTEMCTL_LOG``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_ACTIONS = {"start", "stop", "restart", "enable", "disable"}


def main(argv: list[str]) -> int:
    log = os.environ.get("MIRBAD_FAKE_SYSTEMCTL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(argv) + "\n")
    state_path = Path(os.environ["MIRBAD_FAKE_SYSTEMCTL_STATE"])
    state = json.loads(state_path.read_text(encoding="utf-8"))
    manager, rest = _manager(argv)
    if manager in state.get("failing", []):
        print("Failed to connect to bus: No medium found", file=sys.stderr)
        return 1
    units = state["managers"].setdefault(manager, [])
    positional = _positional(rest)
    command = positional[0] if positional else "list-units"
    if command == "list-units":
        rows = [_unit_row(u) for u in units if u.get("listed", True) and u["unit"].endswith(".service")]
        print(json.dumps(rows, separators=(",", ":")))
        return 0
    if command == "list-unit-files":
        rows = [_file_row(u) for u in units if u.get("file_state")]
        print(json.dumps(rows, separators=(",", ":")))
        return 0
    if command == "show":
        print("\n\n".join(_show(units, name, _properties(rest)) for name in positional[1:]))
        return 0
    if command in state.get("hanging", []):
        time.sleep(3600)  # a wedged manager: hostd's bound has to end the call
    if command in _ACTIONS:
        code = _act(state, units, command, positional[1:])
        state_path.write_text(json.dumps(state, indent=2), encoding="utf-8")
        return code
    print(f"Unknown command verb {command}.", file=sys.stderr)
    return 1


def _manager(argv: list[str]) -> tuple[str, list[str]]:
    user = next(
        (a.removeprefix("--machine=").removesuffix("@") for a in argv if a.startswith("--machine=")), None
    )
    manager = f"user:{user}" if "--user" in argv and user else "system"
    rest = [a for a in argv if a not in {"--user", "--system"} and not a.startswith("--machine=")]
    return manager, rest


def _positional(args: list[str]) -> list[str]:
    found: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--":
            return found + args[index + 1 :]
        if arg in {"-p", "-o", "--property", "--output"}:
            skip = True
        elif not arg.startswith("-"):
            found.append(arg)
    return found


def _properties(args: list[str]) -> list[str]:
    wanted: list[str] = []
    for index, arg in enumerate(args):
        if arg in {"-p", "--property"} and index + 1 < len(args):
            wanted.extend(args[index + 1].split(","))
        elif arg.startswith("--property="):
            wanted.extend(arg.removeprefix("--property=").split(","))
    return wanted


def _unit_row(unit: dict[str, Any]) -> dict[str, Any]:
    return {k: unit.get(k, "") for k in ("unit", "load", "active", "sub", "description")}


def _file_row(unit: dict[str, Any]) -> dict[str, Any]:
    return {"unit_file": unit["unit"], "state": unit["file_state"], "preset": unit.get("preset")}


def _find(units: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((u for u in units if u["unit"] == name), None)


def _show(units: list[dict[str, Any]], name: str, wanted: list[str]) -> str:
    unit = _find(units, name)
    if unit is not None and unit.get("alias_of"):
        unit = _find(units, unit["alias_of"]) or unit
    if unit is None or (not unit.get("listed", True) and not unit.get("file_state")):
        values = {
            "Id": name,
            "Description": name,
            "LoadState": "not-found",
            "ActiveState": "inactive",
            "SubState": "dead",
            "FragmentPath": "",
            "UnitFileState": "",
            "ActiveEnterTimestamp": "",
            "ControlGroup": "",
            "MemoryCurrent": "[not set]",
        }
    else:
        memory = unit.get("memory")
        entered = unit.get("active_enter")
        values = {
            "MemoryCurrent": "[not set]" if memory is None else str(memory),
            "ControlGroup": unit.get("cgroup", "") if unit.get("active") == "active" else "",
            "Id": unit["unit"],
            "Description": unit.get("description", ""),
            "LoadState": unit.get("load", "loaded"),
            "ActiveState": unit.get("active", "inactive"),
            "SubState": unit.get("sub", "dead"),
            "FragmentPath": unit.get("fragment", ""),
            "UnitFileState": unit.get("file_state") or "",
            "ActiveEnterTimestamp": "" if entered is None else f"@{entered}",
        }
    return "\n".join(f"{key}={value}" for key, value in values.items() if not wanted or key in wanted)


def _act(state: dict[str, Any], units: list[dict[str, Any]], command: str, names: list[str]) -> int:
    for name in names:
        unit = _find(units, name)
        if unit is None or name in state.get("failing_actions", []):
            verb = {"start": "start", "stop": "stop", "restart": "restart"}.get(command, command)
            print(f"Failed to {verb} {name}: Unit {name} not found.", file=sys.stderr)
            return 5 if unit is None else 1
        if command in {"start", "restart"}:
            unit.update(active="active", sub="running", active_enter=1764590000)
        elif command == "stop":
            unit.update(active="inactive", sub="dead")
        elif command == "enable":
            unit["file_state"] = "enabled"
        else:
            unit["file_state"] = "disabled"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
